"""The planner of every data probe served as views: which rows of each table a probe drops and
which columns it scales, read from a source's catalog (its engine answers in bounded memory),
and what a store gives the evidence stage to serve its probes as views (`ViewProbeKind`).

The same transformation as `pytest_backintel.evidence.perturb`, decided from the catalog
instead of from frames in memory, so a probe costs the same at 1 MB and at 10 GB:

- each table's entity key is its declared primary key, else its first unique id-like column
  (`id`, `*_id`, `*Id`, `*ID`, `*key`), else its id-like columns together when unique, else
  (a table with no key at all: an event log, a lookup) the whole row, so its rows drop by a
  hash of every column; tables under `MIN_ROWS` rows keep their own rows;
- a table keeps a row only while the row it points at survives, through declared foreign
  keys and through a column named as another table's id-like key (`Invoice.CustomerId` ->
  `Customer.CustomerId`); an edge that would close a cycle is left out;
- REAL, FLOAT, DOUBLE, NUMERIC and DECIMAL columns outside keys are scaled.

Uniqueness of a candidate key is checked by the engine (`COUNT(DISTINCT ...)`, bounded memory).
A table whose rows cannot be dropped is named in the notes, with why.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from filelock import FileLock

from stores.base import Plans, ViewProbeKind
from stores.common.schema_keys import DeclaredKeys
from stores.common.sqlite_file import quote_ident
from stores.probe import TablePlan

__all__ = [
    "DONE_FILE",
    "MIN_ROWS",
    "MOVING_ONE_IN",
    "PERTURB_VERSION",
    "Catalog",
    "Plans",
    "SqlCatalog",
    "ViewProbeKind",
    "build_once",
    "id_like",
    "key_names",
    "moving_plans",
    "plan_tables",
    "write_done",
]

_NUMERIC = ("REAL", "FLOA", "DOUB", "NUM", "DEC")
_NO_KEY = (
    "it has no declared primary key, no unique id-like column (id, *_id, *Id, *ID, *key) and "
    "no foreign key to a table that has one"
)

PERTURB_VERSION = 7
"""Bumped whenever the transformation changes, so old copies are never reused."""


MIN_ROWS = 4

MOVING_ONE_IN = 2
"""A probe that must move an answer drops one row in this many (`moving_plans`)."""


DONE_FILE = "perturbed.json"


def key_names(table: str, columns: list[str]) -> dict[str, str]:
    """Column -> key name, lower-cased, with a short table-wide prefix removed
    (`l_orderkey` -> `orderkey`, `CustomerId` -> `customerid`)."""
    prefixes = {c.split("_", 1)[0] for c in columns if "_" in c}
    if len(prefixes) == 1 and len(next(iter(prefixes))) <= 2 and all("_" in c for c in columns):
        return {c: c.split("_", 1)[1].lower() for c in columns}
    return {c: c.lower() for c in columns}


def id_like(name: str) -> bool:
    """A key by naming convention: `id`, `*_id`, `*Id`, `*ID`, `*key`, `*_key`, `*Key`."""
    low = name.lower()
    return low == "id" or low.endswith(("_id", "key")) or name.endswith(("Id", "ID"))


def write_done(folder: Path, source: str, salt: int, notes: list[str]) -> None:
    """Mark a built copy complete, with the tables it could not perturb (`notes_of`)."""
    done = {"source": source, "salt": salt, "notes": notes}
    (folder / DONE_FILE).write_text(json.dumps(done))


def build_once(cache_dir: Path, final: Path, build: Callable[[Path], None]) -> None:
    """Build the folder `final` under `cache_dir` once (xdist-safe): `build` fills a temporary
    folder, which must end up holding `DONE_FILE`, renamed into place under a file lock (which
    also removes what a builder killed mid-build left: only the lock's holder builds)."""
    if (final / DONE_FILE).is_file():
        return
    cache_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final) + ".lock"):
        if not (final / DONE_FILE).is_file():
            if final.exists():
                shutil.rmtree(final)
            for dead in cache_dir.glob(f".{final.name}.tmp-*"):  # a builder killed mid-build
                shutil.rmtree(dead, ignore_errors=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=cache_dir))
            tmp.chmod(0o755)
            try:
                build(tmp)
                tmp.rename(final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise


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
    plans = {t: TablePlan(columns=list(types[t]), types=dict(types[t])) for t in tables}
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


_INTEGER = re.compile(r"U?(TINY|SMALL|MEDIUM|BIG|HUGE)?INT(EGER)?\d*|INT\d+", re.IGNORECASE)
_TEXT = re.compile(r".*(CHAR|TEXT|STRING|CLOB).*", re.IGNORECASE)


def moving_plans(plans: dict[str, TablePlan], exclude: tuple[str, ...]) -> dict[str, TablePlan]:
    """The plans of a probe that must move an answer the usual probes leave in place: every
    table drops rows (a small one or one with no key by a hash of the whole row), integer
    columns that are no key grow (`TablePlan.shift`) and rows holding one of the `exclude`
    values in a text column are dropped, their dependants with them."""
    out = copy.deepcopy(plans)
    for plan in out.values():
        if not plan.key and not plan.parents:
            plan.key = list(plan.columns)
        fixed = {c for cols, _, _ in plan.parents for c in cols}
        if plan.key != plan.columns:
            fixed |= set(plan.key)
        typed = plan.types
        plan.shift = [
            c
            for c in plan.columns
            if c not in fixed and not id_like(c) and _INTEGER.fullmatch(typed.get(c, "").strip())
        ]
        texts = [c for c in plan.columns if _TEXT.fullmatch(typed.get(c, ""))]
        plan.exclude = [(c, value) for c in texts for value in exclude]
        plan.one_in = MOVING_ONE_IN
    return out
