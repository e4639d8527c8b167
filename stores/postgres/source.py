"""`postgres` for a user's existing database, used in place: no clone, no copy.

Analyst sessions connect to the source database itself, as a SELECT-only LOGIN role:

- when the binding names none and the DSN's user may create roles (superuser or CREATEROLE),
  one role per item, `bi_<hex>_ro`, created with its owner comment in one transaction
  (`stores.owner`, swept by `backintel clean` after a `kill -9`,
  `stores.postgres.sweep`), a random
  password (sent as a SCRAM verifier, so the server's log never holds it) and membership in
  `pg_read_all_data` (PostgreSQL 14+). Membership lives in the shared catalog
  (`pg_auth_members`), so nothing is written into the source database's own catalog: no GRANT
  on its tables, no ALTER ROLE ... SET. The role is dropped when the item ends;
- when the binding names one (`dataset: {postgres: DSN, role: name}`), that role, which the
  harness checks holds no write privilege (not superuser, no INSERT/UPDATE/DELETE/TRUNCATE on
  any table, owns no table) before the first item. Its password is the DSN's when the DSN
  logs in as it, else libpq's (`PGPASSWORD`, `~/.pgpass` or `PGPASSFILE`).

Every session sets `statement_timeout`, `default_transaction_read_only` and `jit=off` in its
startup packet (libpq `options`), and every analyst statement runs in a transaction that is
rolled back (`stores.postgres.store.PostgresSession`). JIT is off because its threshold is a plan
cost, which grows with the tables: on a 1 GB table never analysed, a key-range count costed
past `jit_above_cost` took 60 ms to compile, and over the probe's views (past
`jit_optimize_above_cost`) 450 ms, for a query that runs in 1 ms; every trial re-runs the
evidence on the source and on two probes. Password, TLS (`sslmode`, `sslrootcert`, ...) and
every other DSN parameter reach psycopg and ADBC unchanged (libpq reads them); no error,
record or folder name carries a password (`stores.common.dsn.redact`).

Change detection (`stores.postgres.signature`): per trial a catalog signature, O(1) in the data's
size; the content hash streamed once per signature and cached; each provision compares the
content with the first this process saw (a write the lagging write counters hid from one
trial's check is named at the next item); `teardown_session` hashes again without the cache
and keeps what changed in `changes`.

Other sessions may stay connected to the source for the whole run: nothing here needs them
gone. A denied grant (`DatasetFiles.denied`) cannot be honoured without writing the source's
catalog, so such an item is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import threading
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

from stores.base import (
    DatasetFiles,
    Fingerprint,
    RowCounts,
    Store,
    StoreError,
    ViewProbeKind,
    load_object,
    new_store_id,
)
from stores.capabilities import StoreCapabilities
from stores.common.dsn import redact, without_password
from stores.common.logical_cache import LogicalCache
from stores.common.once import OnceMap
from stores.owner import Owner
from stores.postgres.conn import dsn_user, with_login
from stores.postgres.item import ProvisionedPostgresSource
from stores.postgres.roles import (
    create_login_role,
    drop_login_role,
    scram_verifier,
    write_reach,
)
from stores.postgres.signature import content_hash, signature
from stores.postgres.sweep import SOURCE_FILE, sweep_stale, write_marker

__all__ = ["SOURCE_FILE", "PostgresSourceStore", "ProvisionedPostgresSource"]

_HASHES: dict[tuple[str, str], str] = {}
"""Content hashes by (source, catalog signature), shared by this process's stores of a
source (`backintel references build` and a run's data hash read it once)."""
DROP_WAIT_S = 10.0
"""How long a role's drop waits for its sessions' backends to exit."""


class PostgresSourceStore(Store):
    """A user's existing database served in place (see the module docstring)."""

    name: ClassVar[str] = "postgres"
    capabilities = StoreCapabilities(
        in_place=True,
        perturbation="views",
        sandbox_mount="none",
        read_only="role",
        dialect="postgres",
        server="PostgreSQL",
    )

    def view_probe_kind(self, form: str | None) -> ViewProbeKind | None:
        """Temporary views over the database (`stores.postgres.perturb_views`,
        imported when a probe is built)."""
        if form is not None:
            return None
        kind: ViewProbeKind = load_object("stores.postgres.perturb_views:POSTGRES_VIEWS")
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
        """The database at DSN `location`, read as `role` (or per-item roles)."""
        return cls(workdir, location, role, cache_dir=cache_dir, dsn_env=dsn_env)

    def __init__(
        self,
        workdir: Path,
        source_dsn: str,
        role: str | None = None,
        *,
        statement_timeout_s: float | None = None,
        cache_dir: Path | None = None,
        dsn_env: str | None = None,
    ) -> None:
        super().__init__(workdir, statement_timeout_s=statement_timeout_s)
        self.dsn_env = dsn_env
        """The environment variable the DSN came from, for `backintel clean` to read again."""
        self._stored = (
            None if cache_dir is None else LogicalCache(cache_dir / "hashes", backend=self.name)
        )
        """Content hashes by catalog signature for the next process (`references build`, then
        each run); the end of a run hashes the source again without them."""
        self.source_dsn = source_dsn
        self.source_db = urlsplit(source_dsn).path.lstrip("/")
        if not self.source_db:
            raise StoreError(f"postgres source {self.where} names no database (…/<dbname>)")
        self.named_role = role
        self._owner = Owner.current()
        self._token = secrets.token_hex(4)
        self._conn: Any = None
        self._lock = threading.RLock()
        self._first: str | None = None
        self._signed: str | None = None
        """The catalog signature the last fingerprint read."""
        self._counts = OnceMap[tuple[str, str], int]()
        self._mode: str | None = None
        self._made: set[str] = set()
        self._served = False
        self.changes: list[str] = []
        """What the end-of-run check found changed in the source (empty: nothing)."""

    @property
    def where(self) -> str:
        """The source's DSN as errors and reports may show it (no password)."""
        return redact(self.source_dsn, self.source_dsn)

    @property
    def comment(self) -> str:
        return self._owner.comment(self._token)

    # -- the harness's own connection ------------------------------------------------------
    def _admin(self) -> Any:
        """This process's connection as the DSN's user (autocommit; reopened when broken)."""
        import psycopg

        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        try:
            self._conn = psycopg.connect(self.source_dsn, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise StoreError(
                f"postgres source {self.where}: cannot connect "
                f"({redact(str(exc).strip(), self.source_dsn)})"
            ) from None
        return self._conn

    def login_dsn(self, role: str, password: str | None) -> str:
        """The DSN a session of `role` uses: the source's, as `role`, with the per-session
        settings of the module docstring."""
        timeout_ms = int(self.statement_timeout_s * 1000)
        settings = {
            "statement_timeout": str(timeout_ms),
            "default_transaction_read_only": "on",
            "idle_in_transaction_session_timeout": str(max(timeout_ms * 6, 60_000)),
            "jit": "off",
        }
        return with_login(self.source_dsn, role, password, settings)

    def setup_session(self) -> None:
        super().setup_session()
        self._write_marker()
        with contextlib.suppress(Exception):  # a user who may not drop roles sweeps nothing
            sweep_stale(self.source_dsn)

    def _write_marker(self) -> None:
        """The store folder's record for `backintel clean`
        (`stores.postgres.sweep.SOURCE_FILE`): the DSN without its password, the variable it
        came from, the roles made and not yet dropped; replaced atomically."""
        if not self.workdir.is_dir():  # no session set up here: no folder to keep it in
            return
        doc: dict[str, object] = {"dsn": without_password(self.source_dsn), "env": self.dsn_env}
        doc["made"] = sorted(self._made)
        write_marker(self.workdir / SOURCE_FILE, doc)

    def _decide(self) -> str:
        """'named' (the binding's role, checked read-only) or 'create' (roles per item)."""
        with self._lock:
            if self._mode is not None:
                return self._mode
            if self.named_role is not None:
                self._check_read_only(self.named_role)
                self._mode = "named"
                return self._mode
            row = (
                self._admin()
                .execute(
                    "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user"
                )
                .fetchone()
            )
            if not (row and row[0]):
                user = dsn_user(self.source_dsn) or "the DSN's user"
                raise StoreError(
                    f"postgres source {self.where}: {user} may not create roles, and the "
                    "binding names no read-only role: name one (`dataset: {postgres: DSN, "
                    "role: <a role with SELECT only>}`) or use a DSN whose user has CREATEROLE"
                )
            self._mode = "create"
            return self._mode

    def _check_read_only(self, role: str) -> None:
        """Refuse a named role that could write (see the module docstring)."""
        import psycopg

        dsn = self.login_dsn(role, None)
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
                problems = write_reach(conn)
        except psycopg.Error as exc:
            why = redact(str(exc).strip(), dsn, self.source_dsn)
            raise StoreError(f"postgres source {self.where}: role {role!r}: {why}") from None
        if problems:
            raise StoreError(
                f"postgres source {self.where}: the binding's role {role!r} is not read-only "
                f"({'; '.join(problems)}): give it SELECT only (e.g. GRANT pg_read_all_data)"
            )

    # -- change detection ----------------------------------------------------------------
    def fingerprint(self) -> Fingerprint:
        """Content hash cached by the catalog signature (`stores.postgres.signature`); physical:
        the catalog part and the content together."""
        import psycopg

        with self._lock:
            try:
                conn = self._admin()
                relations, key = signature(conn)
                self._signed = key
                cached = (self.where, key)
                content = _HASHES.get(cached)
                if content is None:
                    content = _HASHES[cached] = self._content_hash(conn, key)
            except psycopg.Error as exc:
                why = redact(str(exc).strip(), self.source_dsn)
                raise StoreError(
                    f"cannot fingerprint postgres source {self.where}: {why}"
                ) from None
            if self._first is None:
                self._first = content
        physical = hashlib.sha256(f"{relations}\0{content}".encode()).hexdigest()
        return Fingerprint(logical=content, physical=physical)

    def _content_hash(self, conn: Any, key: str) -> str:
        """The content hash, read from the disk cache when a process of this source stored
        one for the same catalog signature."""
        if self._stored is None:
            return content_hash(conn)
        slot = hashlib.sha256(f"{self.where}\0{key}".encode()).hexdigest()
        return self._stored.get(slot, lambda: content_hash(conn))

    def row_counts(self) -> RowCounts | None:
        """Row counts shared by the items of one catalog signature (the one the last trial's
        check read): `describe_table` counts each table once per state of the source."""
        key, counts = self._signed, self._counts
        if key is None:
            return None
        return lambda table, count: counts.get((key, table), count)

    def source_fingerprint(self) -> Fingerprint:
        """The source's fingerprint, read as the DSN's user (no role is made)."""
        return self.fingerprint()

    def _check_unchanged(self) -> None:
        first = self._first
        now = self.fingerprint().logical
        if first is not None and now != first:
            raise StoreError(
                f"the postgres source {self.where} changed during the run (content "
                f"{first[:12]}→{now[:12]}): something wrote to it since this run first read "
                "it, so its references no longer describe it"
            )

    # -- items ------------------------------------------------------------------------------
    def provision(self, dataset: DatasetFiles) -> ProvisionedPostgresSource:
        if dataset.denied:
            raise StoreError(
                f"postgres source {self.where} is used in place and cannot withhold a read "
                f"grant on {', '.join(dataset.denied)} without writing its catalog"
            )
        mode = self._decide()
        self._check_unchanged()
        self._served = True
        store_id = new_store_id()
        if mode == "named":
            assert self.named_role is not None
            return ProvisionedPostgresSource(self, store_id, self.named_role, None)
        role, password = f"{store_id}_ro", secrets.token_urlsafe(24)
        self._create_role(role, password)
        return ProvisionedPostgresSource(self, store_id, role, password)

    def _create_role(self, role: str, password: str) -> None:
        import psycopg

        with self._lock:
            try:
                create_login_role(self._admin(), role, scram_verifier(password), self.comment)
            except psycopg.Error as exc:
                why = redact(str(exc).strip(), self.source_dsn)
                raise StoreError(
                    f"postgres source {self.where}: cannot create the item's SELECT-only role "
                    f"(a member of pg_read_all_data, PostgreSQL 14+): {why}; or name a "
                    "read-only role in the binding (`role:`)"
                ) from None
            self._made.add(role)
            self._write_marker()

    def drop_role(self, role: str) -> None:
        """Drop a role this store made; missing is fine (`roles.drop_login_role`)."""
        import psycopg

        with self._lock:
            try:
                drop_login_role(self._admin(), role, DROP_WAIT_S)
            except psycopg.Error as exc:
                why = redact(str(exc).strip(), self.source_dsn)
                raise StoreError(
                    f"postgres source {self.where}: cannot drop {role}: {why}"
                ) from None
            self._made.discard(role)
            self._write_marker()

    def teardown_session(self) -> None:
        """Drop the roles still here, hash the source once more without the cache and keep
        any change in `changes`, then close the connection."""
        for role in sorted(self._made):
            with contextlib.suppress(StoreError):
                self.drop_role(role)
        with self._lock:
            first = self._first
            if first is not None and self._served:
                with contextlib.suppress(Exception):
                    now = content_hash(self._admin())
                    if now != first:
                        self.changes.append(
                            f"the postgres source {self.where} changed during the run (content "
                            f"{first[:12]}→{now[:12]})"
                        )
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    self._conn.close()
                self._conn = None
            self._first = self._mode = None
            self._served = False
