"""`clickhouse-server`: a ClickHouse server the user runs, by DSN, one database per item.

`BACKINTEL_CLICKHOUSE_DSN` (`http://admin:password@host:8123`) names an account that may create
and drop databases (provisioning). `BACKINTEL_CLICKHOUSE_ANALYST` (`user:password`, default
`analyst:`) names the analyst's account, which the server's own configuration must make
read-only: the store checks at start-up that its profile has `readonly=1` and non-zero
`max_execution_time` and `max_memory_usage` and refuses to run otherwise. Privileges are the
guard: on the server that profile refuses writes, DDL, SET, setting overrides in the request
and (on 18.16) every table function. The statement timeout is the profile's
`max_execution_time`, not `statement_timeout_s`.

What `readonly=1` still admits (system tables, other items' databases by qualified name) is
refused before the statement reaches the server by `stores.clickhouse.policy`, on the parse
tree of the process's chDB engine (`formatQuerySingleLine` and `EXPLAIN AST`, never run); the
canonical text chDB formats is what the server runs. The server's ClickHouse may be as old as
18.16 (Debian's package), which has no `EXPLAIN` and no sub-second `DateTime`: tables read come
from chDB's `EXPLAIN AST` (`stores.clickhouse.plans.ast_tables`), dates load as `Date` and
timestamps as `DateTime`, and a dataset with a timestamp finer than a second or a date before
1970 is refused at provisioning. Statements go through ClickHouse's HTTP interface
(`stores.clickhouse.http`: clickhouse-connect cannot start a session on 18.16).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from datetime import UTC, date, datetime
from pathlib import Path

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
from stores.clickhouse.engine import Engine, clickhouse_type, literal, quote
from stores.clickhouse.http import ClickHouseHTTPError, HttpClient, Rows, tsv_row
from stores.clickhouse.plans import ast_tables
from stores.common.caps import ResultCollector, cell_cap
from stores.fingerprint import LogicalHasher

__all__ = ["ANALYST_ENV", "DSN_ENV", "ClickHouseServerStore", "server_type"]

DSN_ENV = "BACKINTEL_CLICKHOUSE_DSN"
ANALYST_ENV = "BACKINTEL_CLICKHOUSE_ANALYST"
_OLD = {"Date32": "Date", "Bool": "UInt8"}
_EPOCH = date(1970, 1, 1)


def server_type(t: pa.DataType, nullable: bool = True) -> str:
    """The column type on a ClickHouse 18.16 server: chDB's, with `Date`, `DateTime`, `UInt8`."""
    name = clickhouse_type(t, False)
    name = "DateTime('UTC')" if name.startswith("DateTime64") else _OLD.get(name, name)
    return f"Nullable({name})" if nullable else name


class ServerSession(StoreSession):
    """The analyst's account on the item's database; statements checked on chDB's parser."""

    def __init__(self, item: ProvisionedServer) -> None:
        self._item = item
        self._store = item.store

    def _run(self, sql: str, analyst_sql: str | None = None) -> Rows:
        self._item.require()
        try:
            return self._store.analyst.query(
                sql, database=self._item.store_id, timeout_s=self._store.statement_timeout_s + 30
            )
        except ClickHouseHTTPError as exc:
            where, timeout_s = self._item.display_id, self._store.statement_timeout_s
            raise policy.classify(str(exc), where, timeout_s, analyst_sql) from exc

    def _parsed(self, sql: str) -> tuple[str, str]:
        """chDB's canonical text and `EXPLAIN AST` of `sql`, once the policy admits it."""
        policy.single_statement(sql)
        engine = self._store.engine
        try:
            found = engine.analyst_parse(f"SELECT formatQuerySingleLine({literal(sql)})")
            canonical = str(found.column(0)[0].as_py())
            policy.output_clauses(canonical)
            tree = engine.analyst_parse(f"EXPLAIN AST {canonical}")
        except RuntimeError as exc:
            where, timeout_s = self._item.display_id, self._store.statement_timeout_s
            raise policy.classify(str(exc), where, timeout_s, sql) from exc
        ast = "\n".join(str(v) for v in tree.column(0).to_pylist())
        policy.check_statement(ast, self._item.store_id, self._store.databases())
        return canonical, ast

    def list_tables(self) -> list[str]:
        return self._item.tables()

    def describe_table(self, name: str) -> TableInfo:
        known = self.list_tables()
        if name not in known:
            raise QueryError(
                f"unknown table {name!r} on {self._item.display_id}; tables are: {', '.join(known)}"
            )
        count = self._store.admin.query(f"SELECT count() AS n FROM {self._item.qualified(name)}")
        cols = self._item.columns(name)
        return TableInfo(
            name, [Column(c, t, t.startswith("Nullable(")) for c, t in cols], count.rows[0][0]
        )

    def run_sql(
        self, sql: str, max_rows: int = MAX_ROWS, max_bytes: int = MAX_RESULT_BYTES
    ) -> QueryResult:
        """Checked as `stores.clickhouse.policy` says; chDB's canonical text runs on the
        server, wrapped so it cuts every variable-size cell and stops at `max_rows + 1` rows."""
        canonical, _ = self._parsed(sql)
        described = self._run(f"DESCRIBE TABLE ({canonical})", sql)
        names = [str(r[0]) for r in described.rows]
        types = [str(r[1]) for r in described.rows]
        cap = cell_cap(len(names), max_rows, max_bytes)
        found = self._run(clickhouse_capped_select(canonical, names, types, cap, max_rows), sql)
        out = ResultCollector(list(names), max_rows, max_bytes, cap)
        out.extend(found.rows)
        return out.result()

    def tables_read(self, sql: str) -> set[str]:
        """The item's tables named in chDB's parse tree of `sql` (see `stores.clickhouse.plans`)."""
        _, ast = self._parsed(sql)
        return ast_tables(ast, self._item.store_id, self.list_tables())

    def close(self) -> None:
        """Nothing held: every statement is one HTTP request."""


class ProvisionedServer(ProvisionedStore):
    """One item's database on the server."""

    backend = "clickhouse-server"

    def __init__(self, store: ClickHouseServerStore, store_id: str) -> None:
        self.store = store
        self.store_id = store_id

    def qualified(self, table: str) -> str:
        return f"{quote(self.store_id)}.{quote(table)}"

    def require(self) -> None:
        if self.store_id not in self.store.databases():
            raise StoreError(f"{self.display_id} was torn down; provision a new store")

    def tables(self) -> list[str]:
        found = self.store.admin.query(
            f"SELECT name FROM system.tables WHERE database = {literal(self.store_id)} "
            "ORDER BY name"
        )
        return [str(r[0]) for r in found.rows]

    def columns(self, table: str) -> list[tuple[str, str]]:
        found = self.store.admin.query(
            f"SELECT name, type FROM system.columns WHERE database = {literal(self.store_id)} "
            f"AND table = {literal(table)}"
        )
        return [(str(n), str(t)) for n, t in found.rows]  # system.columns keeps table order

    def connect(self) -> ServerSession:
        self.require()
        return ServerSession(self)

    def fingerprint(self) -> Fingerprint:
        """Logical over every table's rows sorted by every column; physical over each table's
        CREATE statement and its active parts (name, rows, bytes, data version): any insert,
        delete or mutation makes a new part."""
        self.require()
        admin, hasher = self.store.admin, LogicalHasher()
        physical = hashlib.sha256(b"backintel-clickhouse-server-v1")
        for name in self.tables():
            columns = self.columns(name)
            order = ", ".join(quote(c) for c, _ in columns)
            rows = admin.query(f"SELECT * FROM {self.qualified(name)} ORDER BY {order}").rows
            hasher.add_table(name, columns, rows)
            create = admin.post(f"SHOW CREATE TABLE {self.qualified(name)} FORMAT TSVRaw")
            parts = admin.post(
                "SELECT name, rows, bytes_on_disk, data_version FROM system.parts WHERE "
                f"database = {literal(self.store_id)} AND table = {literal(name)} AND active "
                "ORDER BY name FORMAT TSVRaw"
            )
            physical.update(f"{name}\0{create}\0{parts}\0".encode())
        return Fingerprint(logical=hasher.hexdigest(), physical=physical.hexdigest())

    def teardown(self) -> None:
        self.store.admin.post(f"DROP DATABASE IF EXISTS {quote(self.store_id)}")


class ClickHouseServerStore(Store):
    """Per-item databases on the ClickHouse server named by `BACKINTEL_CLICKHOUSE_DSN`."""

    name = "clickhouse-server"
    capabilities = StoreCapabilities(
        sandbox_mount="none",
        read_only="role",
        dialect="clickhouse",
        server="ClickHouse",
        reads_sqlite_file=False,
    )

    def __init__(self, workdir: Path, *, statement_timeout_s: float | None = None) -> None:
        super().__init__(workdir, statement_timeout_s=statement_timeout_s)
        self._engine: Engine | None = None
        self._admin: HttpClient | None = None
        self._analyst: HttpClient | None = None

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise StoreError("clickhouse-server store: call setup_session() before provisioning")
        return self._engine

    @property
    def admin(self) -> HttpClient:
        if self._admin is None:
            raise StoreError("clickhouse-server store: call setup_session() before provisioning")
        return self._admin

    @property
    def analyst(self) -> HttpClient:
        if self._analyst is None:
            raise StoreError("clickhouse-server store: call setup_session() before connecting")
        return self._analyst

    def databases(self) -> list[str]:
        return [str(r[0]) for r in self.admin.query("SELECT name FROM system.databases").rows]

    def setup_session(self) -> None:
        dsn = os.environ.get(DSN_ENV, "")
        if not dsn:
            raise StoreError(
                f"clickhouse-server store: set {DSN_ENV}=http://admin:password@host:8123 (a "
                f"server account that may create databases) and {ANALYST_ENV}=user:password "
                "(an account whose profile is readonly=1)"
            )
        user, _, password = (os.environ.get(ANALYST_ENV) or "analyst:").partition(":")
        try:
            self._admin = HttpClient(dsn)
            self._analyst = HttpClient(dsn, user=user, password=password)
            self._check_analyst()
        except (ValueError, ClickHouseHTTPError) as exc:
            raise StoreError(f"clickhouse-server store: {exc}") from exc
        super().setup_session()
        self._engine = Engine.acquire(self.workdir)

    def _check_analyst(self) -> None:
        """The analyst's profile must be read-only with time and memory limits: take them."""
        found = self.analyst.query(
            "SELECT name, value FROM system.settings WHERE name IN "
            "('readonly', 'max_execution_time', 'max_memory_usage')"
        )
        settings = {str(n): str(v) for n, v in found.rows}
        bad = [
            f"{k}={settings.get(k)!r}"
            for k in ("max_execution_time", "max_memory_usage")
            if float(settings.get(k, "0")) <= 0
        ]
        if settings.get("readonly") != "1":
            bad.insert(0, f"readonly={settings.get('readonly')!r}")
        if bad:
            raise StoreError(
                f"clickhouse-server store: the analyst account {self.analyst.user!r} on "
                f"{self.analyst.dsn} has {', '.join(bad)}; its profile must set readonly=1 and "
                "non-zero max_execution_time and max_memory_usage (see docs/stores.md)"
            )
        self.statement_timeout_s = float(settings["max_execution_time"])

    def teardown_session(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.release()

    def provision(self, dataset: DatasetFiles) -> ProvisionedServer:
        admin, store_id = self.admin, new_store_id()
        try:
            admin.post(f"CREATE DATABASE {quote(store_id)}")
            for path in sorted(dataset.parquet_dir.glob("*.parquet")):
                data = pq.read_table(path)
                cols = ", ".join(
                    f"{quote(f.name)} {server_type(f.type, f.nullable)}" for f in data.schema
                )
                target = f"{quote(store_id)}.{quote(path.stem)}"
                admin.post(f"CREATE TABLE {target} ({cols}) ENGINE = MergeTree ORDER BY tuple()")
                if data.num_rows:
                    body = "".join(tsv_row(_checked(r, path)) + "\n" for r in _rows(data))
                    admin.post(f"INSERT INTO {target} FORMAT TabSeparated", body=body.encode())
        except Exception as exc:
            with contextlib.suppress(ClickHouseHTTPError):
                admin.post(f"DROP DATABASE IF EXISTS {quote(store_id)}")
            if isinstance(exc, StoreError):
                raise
            raise StoreError(
                f"clickhouse-server store: provisioning {store_id} failed: {exc}"
            ) from exc
        return ProvisionedServer(self, store_id)


def _rows(data: pa.Table) -> list[tuple[object, ...]]:
    columns = [c.to_pylist() for c in data.columns]
    return list(zip(*columns, strict=True))


def _checked(row: tuple[object, ...], path: Path) -> tuple[object, ...]:
    """`row` unchanged, or `StoreError` for a value 18.16's `Date`/`DateTime` cannot hold."""
    for value in row:
        if isinstance(value, datetime) and value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        if isinstance(value, datetime) and (value.microsecond or value.date() < _EPOCH):
            raise StoreError(
                f"clickhouse-server store: {path}: timestamp {value} has a fraction of a second "
                "or is before 1970; this server's DateTime holds whole seconds from 1970"
            )
        if isinstance(value, date) and not isinstance(value, datetime) and value < _EPOCH:
            raise StoreError(
                f"clickhouse-server store: {path}: date {value} is before 1970, the first "
                "day this server's Date holds"
            )
    return row
