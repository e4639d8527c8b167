"""The data probe of a SQLite source as views (`stores.sqlite_probe`), planned from its schema.

The same transformation as `evidence.perturb`, decided from the catalog instead of from
frames in memory, so a probe costs the same at 1 MB and at 10 GB:

- each table's entity key is its declared primary key, else its first unique id-like column
  (`id`, `*_id`, `*Id`, `*ID`, `*key`), else its id-like columns together when unique, else
  (a table with no key at all: an event log, a lookup) the whole row, so its rows drop by a
  hash of every column; tables under `MIN_ROWS` rows keep their own rows;
- a table keeps a row only while the row it points at survives, through declared foreign
  keys and through a column named as another table's id-like key (`Invoice.CustomerId` ->
  `Customer.CustomerId`); an edge that would close a cycle is left out;
- REAL, FLOAT, DOUBLE, NUMERIC and DECIMAL columns outside keys are scaled.

Uniqueness of a candidate key is checked by SQLite (`COUNT(DISTINCT ...)`, bounded memory).
A table whose rows cannot be dropped is named in the notes, with why.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from pytest_backintel.evidence.perturb import (
    MIN_ROWS,
    PERTURB_VERSION,
    build_once,
    id_like,
    key_names,
    write_done,
)
from stores.base import DatasetFiles, ProvisionedStore, Store, new_store_id
from stores.schema_keys import DeclaredKeys, sqlite_declared_keys
from stores.sqlite_build import quote_ident
from stores.sqlite_probe import SQLiteProbeStore, TablePlan, materialise
from stores.sqlite_source import SQLiteSourceStore

__all__ = [
    "Catalog",
    "Plans",
    "SQLiteCatalog",
    "SqlCatalog",
    "ViewProbeKind",
    "plan_tables",
    "sqlite_plan",
    "sqlite_view_probe",
    "view_probe_kind",
]

_NUMERIC = ("REAL", "FLOA", "DOUB", "NUM", "DEC")
_NO_KEY = (
    "it has no declared primary key, no unique id-like column (id, *_id, *Id, *ID, *key) and "
    "no foreign key to a table that has one"
)


class Catalog(Protocol):
    """What the planner reads of a source: its tables, column types, declared keys, and two
    questions answered by the engine in bounded memory."""

    def tables(self) -> list[str]: ...

    def column_types(self, table: str) -> dict[str, str]:
        """Column name -> declared type, upper case, in column order."""

    def declared(self, tables: list[str]) -> DeclaredKeys: ...

    def has_rows(self, table: str, n: int) -> bool:
        """Whether `table` holds at least `n` rows."""

    def unique(self, table: str, cols: list[str]) -> bool:
        """Whether `cols` are never NULL and unique together in `table`."""


class SqlCatalog:
    """`has_rows` and `unique` as SQL any engine runs, over a `query(sql) -> rows` function;
    a subclass reads the tables, types and keys from its engine's catalog."""

    def __init__(self, query: Callable[[str], list[tuple[Any, ...]]]) -> None:
        self.query = query

    def has_rows(self, table: str, n: int) -> bool:
        q = quote_ident(table)
        return (
            int(self.query(f"SELECT COUNT(*) FROM (SELECT 1 FROM {q} LIMIT {n}) AS t")[0][0]) >= n
        )

    def unique(self, table: str, cols: list[str]) -> bool:
        q = quote_ident(table)
        names = ", ".join(quote_ident(c) for c in cols)
        nulls = " OR ".join(f"{quote_ident(c)} IS NULL" for c in cols)
        if self.query(f"SELECT EXISTS (SELECT 1 FROM {q} WHERE {nulls})")[0][0]:
            return False
        total = self.query(f"SELECT COUNT(*) FROM {q}")[0][0]
        distinct = self.query(f"SELECT COUNT(*) FROM (SELECT DISTINCT {names} FROM {q}) AS t")
        return bool(distinct[0][0] == total)


class SQLiteCatalog(SqlCatalog):
    """A SQLite file's catalog (`sqlite_schema`, `PRAGMA table_info`, `foreign_key_list`)."""

    def __init__(self, con: sqlite3.Connection) -> None:
        super().__init__(lambda sql: con.execute(sql).fetchall())
        self.con = con

    def tables(self) -> list[str]:
        return [
            str(r[0])
            for r in self.con.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE "
                "'sqlite_%' AND sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY name"
            )
        ]

    def column_types(self, table: str) -> dict[str, str]:
        info = self.con.execute(f"PRAGMA table_info({quote_ident(table)})").fetchall()
        return {str(r[1]): str(r[2]).upper() for r in info}

    def declared(self, tables: list[str]) -> DeclaredKeys:
        return sqlite_declared_keys(self.con, tables)


def _entity_key(
    catalog: Catalog, table: str, cols: list[str], names: dict[str, str], pk: list[str]
) -> list[str]:
    if pk and set(pk) <= set(cols):
        return pk
    like = [c for c in cols if id_like(c) or id_like(names[c])]
    for col in like:
        if catalog.unique(table, [col]):
            return [col]
    return like if len(like) > 1 and catalog.unique(table, like) else []


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


def plan_tables(catalog: Catalog) -> tuple[dict[str, TablePlan], list[str]]:
    """Each table's plan, read from `catalog`, and the notes on the tables kept whole."""
    tables = catalog.tables()
    declared = catalog.declared(tables)
    types = {t: catalog.column_types(t) for t in tables}
    names = {t: key_names(t, list(types[t])) for t in tables}
    small = {t: not catalog.has_rows(t, MIN_ROWS) for t in tables}
    keys = {
        t: _entity_key(catalog, t, list(types[t]), names[t], declared.primary.get(t, []))
        for t in tables
    }
    return _plans(tables, types, names, small, keys, declared.foreign)


def sqlite_plan(path: Path) -> tuple[dict[str, TablePlan], list[str]]:
    """Each table's plan of a SQLite file and the notes on the tables the probe keeps whole."""
    con = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
    try:
        return plan_tables(SQLiteCatalog(con))
    finally:
        con.close()


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
        name = names[table][key[0]] if len(key) == 1 else "id"
        if name != "id" and (id_like(name) or id_like(key[0])):  # `CustomerId` -> customerid
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
        if not keys[table] and not small[table]:  # no entity key: a hash of the whole row
            plan.key = list(types[table])
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
    store: Store,
    files: DatasetFiles,
    cache_dir: Path,
    salt: int,
    data_hash: str | None,
    plan: dict[str, TablePlan],
    notes: list[str],
) -> SQLiteProbeStore:
    """The probe of a SQLite source for `salt`: sessions read TEMP views over the source;
    Python evidence gets the same tables written to a file under `cache_dir`, built on its
    first use and kept while the source's data hash is the same (xdist-safe)."""
    assert isinstance(store, SQLiteSourceStore)
    assert data_hash is not None
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


Plans = tuple[dict[str, TablePlan], list[str]]


@dataclass(frozen=True)
class ViewProbeKind:
    """A source whose probe is views over it, not a copy: how it is planned (once per
    source) and how one salt's probe is made from the plan."""

    plan: Callable[[Store, DatasetFiles], Plans]
    probe: Callable[
        [Store, DatasetFiles, Path, int, str | None, dict[str, TablePlan], list[str]],
        ProvisionedStore,
    ]


def _sqlite_plan_of(store: Store, files: DatasetFiles) -> Plans:
    assert isinstance(store, SQLiteSourceStore)
    return sqlite_plan(store.source_file(files))


SQLITE_VIEWS = ViewProbeKind(_sqlite_plan_of, sqlite_view_probe)


def view_probe_kind(backend: Store, form: str | None) -> ViewProbeKind | None:
    """How `backend` serves probes of a source of `form` as views (None: as copies)."""
    if form == "sqlite" and isinstance(backend, SQLiteSourceStore):
        return SQLITE_VIEWS
    return None
