"""The data probe of a PostgreSQL source as temporary views (`stores.postgres.probe`), planned
from the PostgreSQL catalog by the generic planner (`stores.common.view_plan.plan_tables`).

The tables are the base and partitioned tables of schema `public` (partitions are read
through their parent); the source's own views and materialised views of `public` are
recreated over the probe's views from their definitions; declared primary and foreign keys
come from `pg_constraint` (`stores.common.schema_keys.postgres_declared_keys`); column types from
`format_type`, so NUMERIC, DECIMAL, REAL and DOUBLE PRECISION columns outside keys are
rescaled. Uniqueness of a candidate key and the row-count floor are asked of PostgreSQL
(bounded memory). The plan is read once per probe build as the DSN's user; each salt's probe
gets its own SELECT-only role.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stores.base import DatasetFiles, ProvisionedStore, Store
from stores.common.schema_keys import DeclaredKeys, postgres_declared_keys
from stores.common.view_plan import Plans, SqlCatalog, ViewProbeKind, plan_tables
from stores.postgres.probe import PostgresProbeStore
from stores.postgres.source import PostgresSourceStore
from stores.probe import TablePlan

__all__ = [
    "POSTGRES_VIEWS",
    "PgCatalog",
    "pg_column_types",
    "pg_plan",
    "pg_views",
]

_TABLES = """
SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY 1
"""
_COLUMNS = """
SELECT c.relname::text, a.attname::text, format_type(a.atttypid, a.atttypmod)
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY 1, a.attnum
"""


_VIEWS = """
SELECT c.relname::text, pg_get_viewdef(c.oid) FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('v', 'm') ORDER BY c.oid
"""


def pg_views(conn: Any) -> list[tuple[str, str]]:
    """(name, definition) of the views and materialised views of `public`, oldest first,
    their definitions written for a `search_path` of `public` (so their table names are
    unqualified and, recreated in a probe session, read the probe's views)."""
    return [(str(name), str(body)) for name, body in conn.execute(_VIEWS).fetchall()]


def pg_column_types(conn: Any) -> dict[str, dict[str, str]]:
    """Table -> column -> type as `format_type` writes it (`numeric(10,2)`), in order."""
    types: dict[str, dict[str, str]] = {}
    for table, column, kind in conn.execute(_COLUMNS).fetchall():
        types.setdefault(str(table), {})[str(column)] = str(kind)
    return types


class PgCatalog(SqlCatalog):
    """The catalog of a PostgreSQL database's `public` schema, over a psycopg connection
    whose `search_path` is `public` (so the planner's unqualified names are its tables)."""

    def __init__(self, conn: Any) -> None:
        super().__init__(lambda sql: conn.execute(sql).fetchall())
        self.conn = conn
        self._types = pg_column_types(conn)

    def tables(self) -> list[str]:
        return [str(r[0]) for r in self.conn.execute(_TABLES).fetchall()]

    def column_types(self, table: str) -> dict[str, str]:
        return {c: t.upper() for c, t in self._types.get(table, {}).items()}

    def declared(self, tables: list[str]) -> DeclaredKeys:
        return postgres_declared_keys(self.conn)


def _connect(store: PostgresSourceStore) -> Any:
    import psycopg

    conn = psycopg.connect(store.source_dsn, autocommit=True, connect_timeout=10)
    conn.execute("SET search_path = public")
    return conn


def pg_plan(store: Store, files: DatasetFiles) -> Plans:
    """Each table's plan of the source and the notes on the tables the probe keeps whole."""
    assert isinstance(store, PostgresSourceStore)
    with _connect(store) as conn:
        return plan_tables(PgCatalog(conn))


def pg_view_probe(
    store: Store,
    files: DatasetFiles,
    cache_dir: Path,
    salt: int,
    data_hash: str | None,
    plan: dict[str, TablePlan],
    notes: list[str],
) -> ProvisionedStore:
    """The probe of a PostgreSQL source for `salt`: its own SELECT-only role whose sessions
    read temporary views over the source. Python evidence has no file to mount on it."""
    assert isinstance(store, PostgresSourceStore)
    with _connect(store) as conn:
        types, views = pg_column_types(conn), pg_views(conn)
    item = store.provision(files)
    return PostgresProbeStore(item, plan, types, salt, store.statement_timeout_s, views)


POSTGRES_VIEWS = ViewProbeKind(pg_plan, pg_view_probe)
