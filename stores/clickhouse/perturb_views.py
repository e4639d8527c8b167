"""The data probe of a ClickHouse source as views (`stores.clickhouse.probe`), planned from the
server's catalog by the generic planner (`stores.common.view_plan.plan_tables`).

The tables are the source database's tables of the MergeTree, Log and Memory families
(`stores.clickhouse.signature.served_tables`); column types come from `system.columns`, so Float and
Decimal columns (Nullable too) outside keys are rescaled. ClickHouse declares no foreign keys,
and its primary key (the sorting key's prefix, `system.tables.primary_key`) is not a uniqueness
constraint: it is each table's entity key when its columns are plain columns, never NULL and
unique together (asked of the server, `uniqExact`), else the key comes from name conventions
like every source without declared keys (`id`, `*_id`, `*Id`, `*ID`, `*key`), and dependants
follow the names (`Invoice.CustomerId` -> `Customer.CustomerId`). The source's own views are
left out of the probe, named in its notes.
"""

from __future__ import annotations

from pathlib import Path

from stores.base import DatasetFiles, ProvisionedStore, Store
from stores.clickhouse.http import HttpClient
from stores.clickhouse.names import literal, quote
from stores.clickhouse.probe import ClickHouseProbeStore
from stores.clickhouse.signature import served_tables, table_columns
from stores.clickhouse.source import ClickHouseSourceStore
from stores.common.schema_keys import DeclaredKeys
from stores.common.view_plan import Plans, ViewProbeKind, plan_tables
from stores.probe import TablePlan

__all__ = ["CLICKHOUSE_VIEWS", "ClickHouseCatalog"]

_VIEWS = ("View", "MaterializedView")


class ClickHouseCatalog:
    """The catalog of one database on a ClickHouse server, read as the DSN's user."""

    def __init__(self, admin: HttpClient, db: str) -> None:
        self.admin = admin
        self.db = db
        served = served_tables(admin, db)
        self.views = [name for name, engine in served if engine in _VIEWS]
        self._tables = [name for name, engine in served if engine not in _VIEWS]
        self._types = table_columns(admin, db)

    def _q(self, table: str) -> str:
        return f"{quote(self.db)}.{quote(table)}"

    def tables(self) -> list[str]:
        return list(self._tables)

    def column_types(self, table: str) -> dict[str, str]:
        return {c: t.upper() for c, t in self._types.get(table, [])}

    def declared(self, tables: list[str]) -> DeclaredKeys:
        """Each table's primary key where it is plain columns that are unique (no FKs)."""
        found = self.admin.query(
            f"SELECT name, primary_key FROM system.tables WHERE database = {literal(self.db)}"
        )
        keys = DeclaredKeys()
        for name, expression in found.rows:
            table = str(name)
            if table not in tables or not str(expression).strip():
                continue
            cols = [c.strip().strip("`") for c in str(expression).split(",")]
            known = {c for c, _ in self._types.get(table, [])}
            if set(cols) <= known and self.unique(table, cols):
                keys.primary[table] = cols
        return keys

    def has_rows(self, table: str, n: int) -> bool:
        found = self.admin.query(f"SELECT count() FROM (SELECT 1 FROM {self._q(table)} LIMIT {n})")
        return int(found.rows[0][0]) >= n

    def unique(self, table: str, cols: list[str]) -> bool:
        names = ", ".join(quote(c) for c in cols)
        nulls = " OR ".join(f"isNull({quote(c)})" for c in cols)
        found = self.admin.query(
            f"SELECT count(), uniqExact({names}), countIf({nulls}) FROM {self._q(table)}"
        )
        total, distinct, null = (int(v) for v in found.rows[0])
        return null == 0 and distinct == total


def ch_plan(store: Store, files: DatasetFiles) -> Plans:
    """Each table's plan of the source and the notes on what the probe keeps whole or leaves
    out (the source's own views)."""
    assert isinstance(store, ClickHouseSourceStore)
    store.connect_admin()
    catalog = ClickHouseCatalog(store.admin, store.source_db)
    plans, notes = plan_tables(catalog)
    notes += [
        f"view {name!r} is left out of the data probe: evidence that reads it is not checked "
        "on perturbed data"
        for name in catalog.views
    ]
    return plans, notes


def ch_view_probe(
    store: Store,
    files: DatasetFiles,
    cache_dir: Path,
    salt: int,
    data_hash: str | None,
    plan: dict[str, TablePlan],
    notes: list[str],
) -> ProvisionedStore:
    """The probe of a ClickHouse source for `salt`: a database of views over the source."""
    assert isinstance(store, ClickHouseSourceStore)
    types = {t: dict(cols) for t, cols in table_columns(store.admin, store.source_db).items()}
    return ClickHouseProbeStore(store, plan, types, salt)


CLICKHOUSE_VIEWS = ViewProbeKind(ch_plan, ch_view_probe)
