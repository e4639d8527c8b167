"""`clickhouse-server` for a user's existing ClickHouse database, used in place: no copy.

`dataset: {clickhouse: DSN}` (`clickhouse://user:password@host:port/db`, `stores.clickhouse.dsn`)
names a database on the user's server. Each item gets a database of its own, `bi_<hex>`
(opaque), holding one read-through table per served table of the source under the table's
name (`CREATE TABLE bi_<hex>.T AS <db>.T ENGINE = Merge(<db>, '^T$')`, which stores nothing
and hands each query to the source table, so its primary key still prunes the read; a view
per view of the source): made from the catalog, so it costs the same at 1 MB and at 10 GB,
and dropped when the item ends. The store folder lists the
databases it made (`stores.clickhouse.dsn.SOURCE_FILE`) so `backintel clean` drops them after a
`kill -9` (ClickHouse 18.16 has no comment on a database to carry an owner).

Read-only is enforced by the server: every analyst statement is one HTTP request as the DSN's
user with `readonly=1` (and `max_execution_time`) in the request's URL, where the statement
(in the body) cannot reach them: the server refuses writes, DDL, SET, a SETTINGS clause and,
on 18.16, every table function (`url`, `file`, `remote`, `mysql`, `jdbc`, `s3`, `merge`,
`cluster`, even `numbers`). What `readonly=1` still admits, reading `system.*`, the source
database or any other by a qualified name (`db.table`), and functions reaching files or
dictionaries, is refused before the statement is sent by the statement check the
`clickhouse-server` store already has (`stores.clickhouse.policy` on chDB's parse tree): the
analyst reaches only its item's database, and through its views the source's tables.

Change detection (`stores.clickhouse.signature`): per item a catalog signature (parts, table
metadata,
columns), never reading data; the content hash is computed by the server once per signature
and cached; each provision compares the content with the first this process saw, and
`teardown_session` hashes again without the cache, keeping any change in `changes`.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
from pathlib import Path
from typing import ClassVar

from stores.base import (
    DatasetFiles,
    Fingerprint,
    Store,
    StoreError,
    ViewProbeKind,
    load_object,
    new_store_id,
)
from stores.capabilities import StoreCapabilities
from stores.clickhouse.dsn import ClickHouseDsn, record
from stores.clickhouse.engine import Engine, literal, quote
from stores.clickhouse.http import ClickHouseHTTPError, HttpClient
from stores.clickhouse.server import ClickHouseServerStore, ProvisionedServer
from stores.clickhouse.signature import content_hash, served_tables, signature

__all__ = ["ClickHouseSourceStore", "ProvisionedClickHouseSource"]

_HASHES: dict[tuple[str, str], str] = {}
"""Content hashes by (source, catalog signature), shared by this process's stores of a
source (`backintel references build` and a run's data hash read it once)."""


def item_tables(src: str, tables: list[tuple[str, str]]) -> list[str]:
    """The statements that make an item's database (`{db}`) read the source `src` (quoted):
    a `Merge` table per table, which hands each query to the source table itself, so its
    primary key and skip indexes still prune the read (18.16 does not push a WHERE into a
    view, so through a view a key lookup would scan the whole table), and a view per view."""
    out = []
    for name, engine in tables:
        target = "{db}." + quote(name)
        if engine in ("View", "MaterializedView"):
            out.append(f"CREATE VIEW {target} AS SELECT * FROM {src}.{quote(name)}")
        else:
            pattern = literal(f"^{re.escape(name)}$")
            out.append(
                f"CREATE TABLE {target} AS {src}.{quote(name)} ENGINE = Merge({src}, {pattern})"
            )
    return out


class ProvisionedClickHouseSource(ProvisionedServer):
    """One item's database of views over the source."""

    backend = "clickhouse-server"
    store: ClickHouseSourceStore

    def fingerprint(self) -> Fingerprint:
        return self.store.fingerprint()

    def tables(self) -> list[str]:
        return [t for t in super().tables() if not t.startswith(".")]

    def teardown(self) -> None:
        self.store.drop_database(self.store_id)


class ClickHouseSourceStore(ClickHouseServerStore):
    """A user's ClickHouse database served in place (see the module docstring)."""

    name: ClassVar[str] = "clickhouse-server"
    capabilities = StoreCapabilities(
        in_place=True,
        perturbation="views",
        sandbox_mount="none",
        read_only="role",
        dialect="clickhouse",
        server="ClickHouse",
    )

    def view_probe_kind(self, form: str | None) -> ViewProbeKind | None:
        """Views over the server's tables (`stores.clickhouse.perturb_views`,
        imported when a probe is built)."""
        if form is not None:
            return None
        kind: ViewProbeKind = load_object("stores.clickhouse.perturb_views:CLICKHOUSE_VIEWS")
        return kind

    @classmethod
    def for_source(
        cls,
        workdir: Path,
        location: str,
        *,
        role: str | None = None,
        cache_dir: Path | None = None,
        dsn_env: str | None = None,
    ) -> Store:
        """The server's database at DSN `location`."""
        return cls(workdir, location)

    @classmethod
    def check_location(cls, location: str) -> None:
        """The DSN's database and parameters, checked at collection."""
        ClickHouseDsn.parse(location)

    def __init__(
        self, workdir: Path, source_dsn: str, *, statement_timeout_s: float | None = None
    ) -> None:
        super().__init__(workdir, statement_timeout_s=statement_timeout_s)
        self.dsn = ClickHouseDsn.parse(source_dsn)
        self.source_db = self.dsn.database
        self._lock = threading.RLock()
        self._made: set[str] = set()
        self._first: str | None = None
        self._served = False
        self.probe_analyst: HttpClient | None = None
        self.changes: list[str] = []
        """What the end-of-run check found changed in the source (empty: nothing)."""

    @property
    def where(self) -> str:
        """The source's DSN as errors and reports may show it (no password)."""
        return self.dsn.shown

    def _fail(self, what: str, exc: Exception) -> StoreError:
        return StoreError(f"clickhouse source {self.where}: {what}: {self.dsn.redact(str(exc))}")

    def connect_admin(self) -> None:
        """The DSN's user's own client, checked against the server; no engine, no folder."""
        if self._admin is not None:
            return
        admin = self.dsn.client()
        try:
            found = admin.query(
                f"SELECT count() FROM system.databases WHERE name = {literal(self.source_db)}"
            )
        except (ClickHouseHTTPError, OSError) as exc:
            raise self._fail("cannot connect", exc) from None
        if not found.rows or found.rows[0][0] == 0:
            raise StoreError(f"clickhouse source {self.where}: no database {self.source_db!r}")
        self._admin = admin

    def setup_session(self) -> None:
        """Connect, check the source exists, start the statement checker (chDB)."""
        self.connect_admin()
        timeout = f"{max(1, round(self.statement_timeout_s))}"
        # `readonly` last: the server applies the URL's settings in order
        self._analyst = self.dsn.client({"max_execution_time": timeout, "readonly": "1"})
        pushdown = {"enable_optimize_predicate_expression": "1"} if self._has_pushdown() else {}
        self.probe_analyst = self.dsn.client(
            {"max_execution_time": timeout, **pushdown, "readonly": "1"}
        )
        """The probes' client: their tables are views with a WHERE, which 18.16 reads whole
        unless it may push the query's own WHERE into them (off by default there)."""
        Store.setup_session(self)
        record(self.workdir, self.dsn, set())
        self._engine = Engine.acquire(self.workdir)

    def _has_pushdown(self) -> bool:
        """Whether the server knows `enable_optimize_predicate_expression` (18.x on)."""
        found = self.admin.query(
            "SELECT count() FROM system.settings "
            "WHERE name = 'enable_optimize_predicate_expression'"
        )
        return bool(found.rows and found.rows[0][0])

    # -- change detection ----------------------------------------------------------------
    def fingerprint(self) -> Fingerprint:
        """Content hash cached by the catalog signature (`stores.clickhouse.signature`); physical:
        the signature and the content together."""
        with self._lock:
            self.connect_admin()
            try:
                key = signature(self.admin, self.source_db)
                content = _HASHES.get((self.where, key))
                if content is None:
                    content = content_hash(self.admin, self.source_db)
                    _HASHES[(self.where, key)] = content
            except ClickHouseHTTPError as exc:
                raise self._fail("cannot fingerprint", exc) from None
            if self._first is None:
                self._first = content
        physical = hashlib.sha256(f"{key}\0{content}".encode()).hexdigest()
        return Fingerprint(logical=content, physical=physical)

    def source_fingerprint(self) -> Fingerprint:
        """The source's fingerprint, read as the DSN's user (no database is made)."""
        return self.fingerprint()

    def _check_unchanged(self) -> None:
        first = self._first
        now = self.fingerprint().logical
        if first is not None and now != first:
            raise StoreError(
                f"the clickhouse source {self.where} changed during the run (content "
                f"{first[:12]}→{now[:12]}): something wrote to it since this run first read "
                "it, so its references no longer describe it"
            )

    # -- items ------------------------------------------------------------------------------
    def create_database(self, views: list[str]) -> str:
        """A fresh `bi_<hex>` database holding `views` (statements with `{db}` for its name),
        listed in the store folder before it exists (`stores.clickhouse.dsn.record`)."""
        store_id = new_store_id()
        with self._lock:
            self._made.add(store_id)
            record(self.workdir, self.dsn, self._made)
        try:
            self.admin.post(f"CREATE DATABASE {quote(store_id)}")
            for statement in views:
                self.admin.post(statement.replace("{db}", quote(store_id)))
        except ClickHouseHTTPError as exc:
            with contextlib.suppress(StoreError):
                self.drop_database(store_id)
            raise self._fail(f"cannot create the item's database {store_id}", exc) from None
        return store_id

    def drop_database(self, name: str) -> None:
        """Drop a database this store made (missing is fine) and unlist it."""
        try:
            self.admin.post(f"DROP DATABASE IF EXISTS {quote(name)}")
        except ClickHouseHTTPError as exc:
            raise self._fail(f"cannot drop {name}", exc) from None
        with self._lock:
            self._made.discard(name)
            record(self.workdir, self.dsn, self._made)

    def provision(self, dataset: DatasetFiles) -> ProvisionedClickHouseSource:
        if dataset.denied:
            raise StoreError(
                f"clickhouse source {self.where} is used in place and cannot withhold "
                f"{', '.join(dataset.denied)} (every table of the source is served)"
            )
        self._check_unchanged()
        self._served = True
        src = quote(self.source_db)
        try:
            tables = served_tables(self.admin, self.source_db)
        except ClickHouseHTTPError as exc:
            raise self._fail("cannot list the tables", exc) from None
        return ProvisionedClickHouseSource(self, self.create_database(item_tables(src, tables)))

    def teardown_session(self) -> None:
        """Drop the databases still here, hash the source once more without the cache and
        keep any change in `changes`, then stop the statement checker."""
        for name in sorted(self._made):
            with contextlib.suppress(StoreError):
                self.drop_database(name)
        with self._lock:
            first = self._first
            if first is not None and self._served and self._admin is not None:
                with contextlib.suppress(Exception):
                    now = content_hash(self._admin, self.source_db)
                    if now != first:
                        self.changes.append(
                            f"the clickhouse source {self.where} changed during the run "
                            f"(content {first[:12]}→{now[:12]})"
                        )
            self._first = None
            self._served = False
        super().teardown_session()
