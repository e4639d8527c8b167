"""`clickhouse`: a real ClickHouse engine, embedded through chDB, one database per item.

chDB runs ClickHouse in-process and allows one data folder per process, so every `clickhouse`
store of a process shares one engine (`stores.clickhouse.engine.Engine`, reference counted)
under `<workdir>/chdb-<pid>/` of the first store set up; the folder is removed when the last
store is torn down, and `setup_session` removes folders left by processes that are gone.
Per item: database `bi_<hex>` holding one MergeTree table per Parquet file, columns typed
from the Arrow schema (`Nullable(...)`, `Decimal(p, s)`, `Date32`, `DateTime64(p)`), loaded
through chDB's Python table function on the engine's admin connection.

The analyst's connection is a separate chDB connection whose profile is the guard:
`readonly=1` (no writes, DDL, setting changes or external table functions),
`allow_python_table_function=0`, `allow_introspection_functions=0`, the item's database as
the current one, `max_execution_time` (the statement timeout), `max_memory_usage` (1 GB),
`max_threads=1`, `limit` (the row cap, applied by ClickHouse to the outermost query only), and
standard SQL NULLs (`join_use_nulls=1`: an outer join's missing side is NULL, not 0 or '';
`aggregate_functions_null_for_empty=1`: SUM of no rows is NULL, not 0).
`stores.clickhouse.policy` refuses what `readonly=1` still admits before it reaches the engine.

Values come back as Arrow and are normalised like every other backend: NULL as None, Decimal as
Decimal, Date as `date`, DateTime/DateTime64 as naive UTC `datetime` (the session time zone is
UTC; plain DateTime, which ClickHouse sends as UInt32, is recognised by its declared type).

Tables read (`tables_read`, for literal evidence) come from `EXPLAIN QUERY TREE` of the
canonical text (`stores.clickhouse.plans`).

Fingerprints: logical via `stores.fingerprint.LogicalHasher` over every table's rows sorted by
every column (`ORDER BY ALL`); physical is a sha256 over each table's name, CREATE statement and
the bytes of every file in its data folder (MergeTree parts are immutable, so any write, delete
or mutation adds or changes files there).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from stores.base import (
    MAX_RESULT_BYTES,
    MAX_ROWS,
    Column,
    DatasetFiles,
    Fingerprint,
    ProvisionedStore,
    QueryError,
    QueryResult,
    Store,
    StoreError,
    StoreSession,
    TableInfo,
    new_store_id,
)
from stores.capabilities import StoreCapabilities
from stores.clickhouse import policy
from stores.clickhouse.caps import clickhouse_capped_select
from stores.clickhouse.engine import Engine, arrow, cells, clickhouse_type, literal, quote
from stores.clickhouse.plans import query_tree_tables
from stores.common.caps import ResultCollector, cell_cap
from stores.fingerprint import LogicalHasher, tree_sha256

__all__ = ["ClickHouseStore", "ProvisionedClickHouse", "clickhouse_type"]


class ClickHouseSession(StoreSession):
    """Analyst connections (one per row cap) on the item's database, and their guard."""

    def __init__(self, item: ProvisionedClickHouse) -> None:
        self._item = item
        self._engine = item.engine
        self._conns: dict[int, Any] = {}
        self._lock = threading.Lock()

    def _conn(self, max_rows: int) -> Any:
        if max_rows not in self._conns:
            self._item.require()
            self._conns[max_rows] = self._engine.analyst(
                self._item.store_id, self._item.timeout_s, max_rows + 1
            )
        return self._conns[max_rows]

    def _query(self, sql: str, max_rows: int, analyst_sql: str | None = None) -> pa.Table:
        try:
            return arrow(self._conn(max_rows).query(sql, "Arrow"))
        except (RuntimeError, ValueError) as exc:  # chDB raises ChdbError, a RuntimeError
            self._discard(max_rows)  # a failed chDB connection can answer the next query wrongly
            where, timeout_s = self._item.display_id, self._item.timeout_s
            raise policy.classify(str(exc), where, timeout_s, analyst_sql) from exc

    def _discard(self, max_rows: int) -> None:
        conn = self._conns.pop(max_rows, None)
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def list_tables(self) -> list[str]:
        return self._item.tables()

    def describe_table(self, name: str) -> TableInfo:
        known = self.list_tables()
        if name not in known:
            raise QueryError(
                f"unknown table {name!r} on {self._item.display_id}; tables are: {', '.join(known)}"
            )
        cols = self._item.columns(name)
        count = self._engine.run(f"SELECT count() AS n FROM {self._item.qualified(name)}")
        return TableInfo(
            name=name,
            columns=[Column(c, t, t.startswith("Nullable(")) for c, t in cols],
            row_count=int(count["n"][0].as_py()),
        )

    def run_sql(
        self, sql: str, max_rows: int = MAX_ROWS, max_bytes: int = MAX_RESULT_BYTES
    ) -> QueryResult:
        """Checked as `stores.clickhouse.policy` says; the canonical text is what runs, wrapped
        so the engine cuts every variable-size cell and stops at `max_rows + 1` rows."""
        with self._lock:
            canonical = self._checked(sql, max_rows)
            described = self._query(f"DESCRIBE ({canonical})", max_rows, sql)
            names, types = described["name"].to_pylist(), described["type"].to_pylist()
            cap = cell_cap(len(names), max_rows, max_bytes)
            table = self._query(
                clickhouse_capped_select(canonical, names, types, cap, max_rows), max_rows
            )
            declared = dict(zip(names, types, strict=True))
        out = ResultCollector(list(names), max_rows, max_bytes, cap)
        out.extend(cells(table.slice(0, max_rows + 1), declared))
        return out.result()

    def _text(self, sql: str, max_rows: int, analyst_sql: str) -> str:
        found = self._query(sql, max_rows, analyst_sql)
        return "\n".join(str(v) for v in found.column(0).to_pylist()) if found.num_columns else ""

    def _checked(self, sql: str, max_rows: int) -> str:
        """ClickHouse's canonical text of `sql` once `stores.clickhouse.policy` admits it."""
        policy.single_statement(sql)
        canonical = self._text(f"SELECT formatQuerySingleLine({literal(sql)})", max_rows, sql)
        policy.output_clauses(canonical)
        ast = self._text(f"EXPLAIN AST {canonical}", max_rows, sql)
        policy.check_statement(ast, self._item.store_id, self._engine.databases())
        return canonical

    def tables_read(self, sql: str) -> set[str]:
        """The item's tables in ClickHouse's resolved query tree (`stores.clickhouse.plans`)."""
        with self._lock:
            canonical = self._checked(sql, MAX_ROWS)
            tree = self._text(f"EXPLAIN QUERY TREE {canonical}", MAX_ROWS, sql)
        return query_tree_tables(tree, self._item.store_id)

    def engine_query(self, sql: str) -> pa.Table:
        """`sql` on the analyst's read-only connection without the statement check (tests use
        it to show the engine guard holds by itself)."""
        with self._lock:
            return self._query(sql, MAX_ROWS)

    def close(self) -> None:
        with self._lock:
            for conn in self._conns.values():
                with contextlib.suppress(Exception):
                    conn.close()
            self._conns.clear()


class ProvisionedClickHouse(ProvisionedStore):
    """One item's database in the process's chDB engine."""

    backend = "clickhouse"

    def __init__(self, store: ClickHouseStore, store_id: str) -> None:
        self._store = store
        self.engine = store.engine
        self.store_id = store_id
        self.timeout_s = store.statement_timeout_s

    def qualified(self, table: str) -> str:
        return f"{quote(self.store_id)}.{quote(table)}"

    def require(self) -> None:
        if self.store_id not in self.engine.databases():
            raise StoreError(f"{self.display_id} was torn down; provision a new store")

    def tables(self) -> list[str]:
        found = self.engine.run(
            f"SELECT name FROM system.tables WHERE database = {literal(self.store_id)} "
            "ORDER BY name"
        )
        return [str(v) for v in found["name"].to_pylist()]

    def columns(self, table: str) -> list[tuple[str, str]]:
        found = self.engine.run(
            f"SELECT name, type FROM system.columns WHERE database = {literal(self.store_id)} "
            f"AND table = {literal(table)} ORDER BY position"
        )
        return list(zip(found["name"].to_pylist(), found["type"].to_pylist(), strict=True))

    def connect(self) -> ClickHouseSession:
        self.require()
        return ClickHouseSession(self)

    def fingerprint(self) -> Fingerprint:
        self.require()
        hasher = LogicalHasher()
        physical = hashlib.sha256(b"backintel-clickhouse-v1")
        meta = self.engine.run(
            "SELECT name, create_table_query AS q, data_paths AS p FROM system.tables "
            f"WHERE database = {literal(self.store_id)} ORDER BY name"
        )
        for name, create, paths in zip(
            *(meta[c].to_pylist() for c in ("name", "q", "p")), strict=True
        ):
            columns = self.columns(str(name))
            rows = self.engine.run(f"SELECT * FROM {self.qualified(str(name))} ORDER BY ALL")
            hasher.add_table(str(name), columns, cells(rows))
            physical.update(f"{name}\0{create}\0".encode())
            for folder in sorted(str(p) for p in paths):
                if Path(folder).is_dir():
                    physical.update(tree_sha256(Path(folder)).encode())
        return Fingerprint(logical=hasher.hexdigest(), physical=physical.hexdigest())

    def teardown(self) -> None:
        self.engine.run(f"DROP DATABASE IF EXISTS {quote(self.store_id)} SYNC")


class ClickHouseStore(Store):
    """Per-item databases in an embedded ClickHouse (chDB)."""

    name = "clickhouse"
    capabilities = StoreCapabilities(
        sandbox_mount="none", read_only="policy", dialect="clickhouse", reads_sqlite_file=False
    )

    def __init__(self, workdir: Path, *, statement_timeout_s: float | None = None) -> None:
        super().__init__(workdir, statement_timeout_s=statement_timeout_s)
        self._engine: Engine | None = None
        self._created: set[str] = set()

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise StoreError("clickhouse store: call setup_session() before provisioning")
        return self._engine

    def setup_session(self) -> None:
        super().setup_session()
        for stale in self.workdir.glob("chdb-*"):
            pid = stale.name.removeprefix("chdb-")
            if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
                shutil.rmtree(stale, ignore_errors=True)
        if self._engine is None:
            self._engine = Engine.acquire(self.workdir)

    def teardown_session(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            for name in engine.databases():
                if name in self._created:
                    engine.run(f"DROP DATABASE IF EXISTS {quote(name)} SYNC")
            engine.release()

    def provision(self, dataset: DatasetFiles) -> ProvisionedClickHouse:
        engine = self.engine
        store_id = new_store_id()
        self._created.add(store_id)
        try:
            engine.run(f"CREATE DATABASE {quote(store_id)}")
            for path in sorted(dataset.parquet_dir.glob("*.parquet")):
                data = pq.read_table(path)
                cols = ", ".join(
                    f"{quote(f.name)} {clickhouse_type(f.type, f.nullable)}" for f in data.schema
                )
                target = f"{quote(store_id)}.{quote(path.stem)}"
                engine.run(f"CREATE TABLE {target} ({cols}) ENGINE = MergeTree ORDER BY tuple()")
                if data.num_rows:
                    engine.load(target, data)
        except Exception as exc:
            with contextlib.suppress(StoreError):
                engine.run(f"DROP DATABASE IF EXISTS {quote(store_id)} SYNC")
            if isinstance(exc, StoreError):
                raise
            raise StoreError(f"clickhouse store: provisioning {store_id} failed: {exc}") from exc
        return ProvisionedClickHouse(self, store_id)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
