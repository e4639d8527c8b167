"""The data probe of a SQLite source as views (`stores.sqlite_probe`), planned from its schema.

The same transformation as `evidence.perturb`, decided from the catalog instead of from
frames in memory, so a probe costs the same at 1 MB and at 10 GB:

- each table's entity key is its declared primary key, else its first unique id-like column
  (`id`, `*_id`, `*Id`, `*ID`, `*key`), else its id-like columns together when unique;
  tables under `MIN_ROWS` rows keep their own rows;
- a table keeps a row only while the row it points at survives, through declared foreign
  keys and through a column named as another table's id-like key (`Invoice.CustomerId` ->
  `Customer.CustomerId`); an edge that would close a cycle is left out;
- REAL, FLOAT, DOUBLE, NUMERIC and DECIMAL columns outside keys are scaled.

Uniqueness of a candidate key is checked by SQLite (`COUNT(DISTINCT ...)`, bounded memory).
A table whose rows cannot be dropped is named in the notes, with why.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote

from pytest_backintel.evidence.perturb import (
    MIN_ROWS,
    PERTURB_VERSION,
    build_once,
    id_like,
    key_names,
    write_done,
)
from stores.base import DatasetFiles, new_store_id
from stores.schema_keys import sqlite_declared_keys
from stores.sqlite_build import quote_ident
from stores.sqlite_probe import SQLiteProbeStore, TablePlan, materialise
from stores.sqlite_source import SQLiteSourceStore

__all__ = ["sqlite_plan", "sqlite_view_probe"]

_NUMERIC = ("REAL", "FLOA", "DOUB", "NUM", "DEC")
_NO_KEY = (
    "it has no declared primary key, no unique id-like column (id, *_id, *Id, *ID, *key) and "
    "no foreign key to a table that has one"
)


def _unique(con: sqlite3.Connection, table: str, cols: list[str]) -> bool:
    q = quote_ident(table)
    names = ", ".join(quote_ident(c) for c in cols)
    nulls = " OR ".join(f"{quote_ident(c)} IS NULL" for c in cols)
    if con.execute(f"SELECT EXISTS (SELECT 1 FROM {q} WHERE {nulls})").fetchone()[0]:
        return False
    total = con.execute(f"SELECT COUNT(*) FROM {q}").fetchone()[0]
    distinct = con.execute(f"SELECT COUNT(*) FROM (SELECT DISTINCT {names} FROM {q})")
    return bool(distinct.fetchone()[0] == total)


def _entity_key(
    con: sqlite3.Connection, table: str, cols: list[str], names: dict[str, str], pk: list[str]
) -> list[str]:
    if pk and set(pk) <= set(cols):
        return pk
    like = [c for c in cols if id_like(c) or id_like(names[c])]
    for col in like:
        if _unique(con, table, [col]):
            return [col]
    return like if len(like) > 1 and _unique(con, table, like) else []


Edge = tuple[str, list[str], str, list[str]]


def _acyclic(edges: list[Edge]) -> list[Edge]:
    """The edges (child, cols, parent, pcols) that keep the graph free of cycles, in order."""
    kept: list[Edge] = []

    def reaches(start: str, goal: str) -> bool:
        todo, seen = [start], set()
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                todo += [p for c, _, p, _ in kept if c == node]
        return False

    for edge in edges:
        child, _, parent, _ = edge
        if child != parent and not reaches(parent, child):
            kept.append(edge)
    return kept


def sqlite_plan(path: Path) -> tuple[dict[str, TablePlan], list[str]]:
    """Each table's plan and the notes on the tables the probe keeps whole."""
    con = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
    try:
        tables = [
            str(r[0])
            for r in con.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE "
                "'sqlite_%' AND sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY name"
            )
        ]
        declared = sqlite_declared_keys(con, tables)
        types: dict[str, dict[str, str]] = {}
        for table in tables:
            info = con.execute(f"PRAGMA table_info({quote_ident(table)})").fetchall()
            types[table] = {str(r[1]): str(r[2]).upper() for r in info}
        names = {t: key_names(t, list(types[t])) for t in tables}
        small = {
            t: con.execute(
                f"SELECT COUNT(*) FROM (SELECT 1 FROM {quote_ident(t)} LIMIT {MIN_ROWS})"
            ).fetchone()[0]
            < MIN_ROWS
            for t in tables
        }
        keys = {
            t: _entity_key(con, t, list(types[t]), names[t], declared.primary.get(t, []))
            for t in tables
        }
    finally:
        con.close()
    return _plans(tables, types, names, small, keys, declared.foreign)


def _plans(
    tables: list[str],
    types: dict[str, dict[str, str]],
    names: dict[str, dict[str, str]],
    small: dict[str, bool],
    keys: dict[str, list[str]],
    foreign: list[Edge],
) -> tuple[dict[str, TablePlan], list[str]]:
    entity: dict[str, tuple[str, str]] = {}
    for table in tables:
        key = keys[table]
        if len(key) == 1 and (name := names[table][key[0]]) != "id" and id_like(name):
            entity.setdefault(name, (table, key[0]))
    edges = [
        (t, cols, p, pcols)
        for t, cols, p, pcols in foreign
        if t in types and p in types and set(cols) <= set(types[t]) and set(pcols) <= set(types[p])
    ]
    linked = {(t, tuple(cols)) for t, cols, _, _ in edges}
    for table in tables:
        for col, name in names[table].items():
            owner = entity.get(name)
            if owner and owner[0] != table and (table, (col,)) not in linked:
                edges.append((table, [col], owner[0], [owner[1]]))
    plans = {t: TablePlan(columns=list(types[t])) for t in tables}
    for child, cols, parent, pcols in _acyclic(edges):
        plans[child].parents.append((cols, parent, pcols))
    notes = []
    for table in tables:
        plan = plans[table]
        plan.key = [] if small[table] else keys[table]
        fixed = set(keys[table]) | {c for cols, _, _ in plan.parents for c in cols}
        plan.scale = [
            c
            for c, t in types[table].items()
            if c not in fixed and "INT" not in t and any(k in t for k in _NUMERIC)
        ]
        if plan.key or plan.parents:
            continue
        why = f"it has fewer than {MIN_ROWS} rows" if keys[table] else _NO_KEY
        moved = (
            "its numbers are rescaled"
            if plan.scale
            else "nothing in it changes, so a count or a literal over it alone is not caught"
        )
        notes.append(f"table {table!r} keeps every row: {why}; {moved}")
    return plans, notes


def sqlite_view_probe(
    store: SQLiteSourceStore,
    files: DatasetFiles,
    cache_dir: Path,
    salt: int,
    data_hash: str,
    plan: dict[str, TablePlan],
    notes: list[str],
) -> SQLiteProbeStore:
    """The probe of a SQLite source for `salt`: sessions read TEMP views over the source;
    Python evidence gets the same tables written to a file under `cache_dir`, built on its
    first use and kept while the source's data hash is the same (xdist-safe)."""
    source = store.source_file(files)
    final = cache_dir / f"{files.name}-sqlite-views-v{PERTURB_VERSION}-s{salt}-{data_hash[:16]}"

    def build(tmp: Path) -> None:
        materialise(source, plan, salt, tmp / "data.sqlite")
        write_done(tmp, str(source), salt, notes)

    def materialised() -> Path:
        build_once(cache_dir, final, build)
        return final / "data.sqlite"

    timeout = store.statement_timeout_s
    return SQLiteProbeStore(source, new_store_id(), timeout, plan, salt, materialised)
