"""`postgres`: a fresh database and a SELECT-only login role per item on a real server.

Server: `BACKINTEL_PG_DSN` (default `postgresql://postgres@127.0.0.1:5432/postgres`), used as
the admin connection (psycopg, autocommit). `BACKINTEL_PG_DSN=initdb` starts a private cluster
per session instead (`stores.postgres.cluster`), stopped and deleted by `teardown_session`.

Per item: database `bi_<hex>` and role `bi_<hex>_ro`; CONNECT and TEMPORARY revoked from
PUBLIC on that database, the role gets CONNECT on it, USAGE on schema `public` (CREATE revoked
from PUBLIC) and SELECT on its tables only, with
`statement_timeout` and `default_transaction_read_only` set for the role. Privileges are the
guard; every analyst statement also runs in a transaction that is rolled back, so a
`set_config(...)` inside a SELECT cannot outlive it, and non-query statements (SET, DDL, DML)
are refused up front by their leading keyword.

Tables are created from the Parquet schema (exact NUMERIC(p,s), DATE, TIMESTAMP) and bulk loaded
through ADBC (`adbc_ingest`). The analyst connects through ADBC as the role
(`stores.postgres.session`); NUMERIC, which ADBC returns as text, is converted back to
`Decimal` by the column's type.

Fingerprints: logical via `stores.fingerprint` over every table's rows; physical is a sha256 of
catalog and tuple state: for every relation in `public` its name, kind, relfilenode and columns
(attname, type, typmod), and for every table the (ctid, xmin) of each row. Any INSERT, UPDATE,
DELETE, TRUNCATE or DDL changes it; VACUUM (non-FULL), ANALYZE and hint bits do not. The
asynchronous pg_stat counters are left out because they settle up to a second after a write.

Marks: every database is created owned by the process's owner role `bi_<hex>_own` (NOLOGIN),
which is created together with its comment (`stores.owner`: host, boot id, pid and
start time)
in one transaction, and every item role is created with its comment in one transaction too. So
whatever instant the harness is killed at, each `bi_` database and role on the server carries
its owner, and `setup_session` (and `backintel clean`, through `sweep_stale`) drops those left
by a process on this host that is gone; `teardown_session` drops this process's own. (CREATE
DATABASE cannot run in a transaction: the owner role is its atomic mark; the database comment
follows as before.)
"""

from __future__ import annotations

import hashlib
import os
import secrets
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow.parquet as pq

from stores.base import (
    Attachment,
    DatasetFiles,
    Fingerprint,
    ProvisionedStore,
    Store,
    StoreError,
    new_store_id,
)
from stores.capabilities import StoreCapabilities
from stores.common.faults import fault_point
from stores.common.logical_cache import LogicalCache
from stores.owner import Owner
from stores.postgres.cluster import ThrowawayCluster
from stores.postgres.config import DEFAULT_DSN, INITDB
from stores.postgres.conn import adbc_module, ident, with_db
from stores.postgres.session import PostgresSession, arrow_rows
from stores.postgres.sweep import sweep_stale
from stores.postgres.types import pg_type

__all__ = ["PostgresSession", "PostgresStore", "ProvisionedPostgres", "pg_type"]


def _logical(cur: Any, tables: list[str]) -> str:
    """The logical fingerprint of `tables`: their columns and every row, in order."""
    from stores import fingerprint

    hasher = fingerprint.LogicalHasher()
    for name in tables:
        cur.execute(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) "
            "FROM pg_attribute a WHERE a.attrelid = $1::regclass AND a.attnum > 0 "
            "AND NOT a.attisdropped ORDER BY a.attnum",
            (ident(name),),
        )
        columns = [(str(c), str(t)) for c, t in cur.fetchall()]
        order = ", ".join(str(i + 1) for i in range(len(columns)))
        cur.execute(f"SELECT * FROM {ident(name)} ORDER BY {order or 'ctid'}")
        hasher.add_table(name, columns, arrow_rows(cur.fetch_arrow_table()))
    return hasher.hexdigest()


class ProvisionedPostgres(ProvisionedStore):
    backend = "postgres"

    def __init__(self, store: PostgresStore, store_id: str) -> None:
        self._store = store
        self.store_id = store_id
        self.role = f"{store_id}_ro"

    @property
    def admin_dsn(self) -> str:
        """The owner's DSN of this database (for the harness only, never the analyst)."""
        return with_db(self._store.dsn, self.store_id)

    def connect(self) -> PostgresSession:
        uri = with_db(self._store.dsn, self.store_id, user=self.role)
        return PostgresSession(uri, self.display_id, self._store.statement_timeout_s)

    def attachment(self) -> Attachment | None:
        dsn = urlsplit(self._store.dsn)
        conninfo = (
            f"host={dsn.hostname or '127.0.0.1'} port={dsn.port or 5432} "
            f"user={self.role} dbname={self.store_id}"
        )
        return Attachment(conninfo, "postgres", "public", (), ("postgres_scanner",))

    def fingerprint(self) -> Fingerprint:
        """Physical: the relations, their columns and files, and each table's row versions
        (`ctid`, `xmin`: a write of any row makes new ones); logical: every row, read only
        when this process has not seen that physical hash (a copy of the same template has
        it, since CREATE DATABASE copies files, row versions and all)."""
        adbc = adbc_module()

        physical = hashlib.sha256()
        with adbc.connect(with_db(self._store.dsn, self.store_id)) as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT c.relname::text, c.relkind::text, c.relfilenode::text, "
                "coalesce(string_agg(a.attname || ':' || a.atttypid || ':' || a.atttypmod, ',' "
                "ORDER BY a.attnum), '') FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace LEFT JOIN pg_attribute a "
                "ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
                "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') "
                "GROUP BY 1, 2, 3 ORDER BY 1"
            )
            relations = cur.fetchall()
            physical.update(repr(relations).encode())
            tables = sorted(str(r[0]) for r in relations if r[1] in ("r", "v", "m"))
            for name in tables:
                cur.execute(
                    f"SELECT md5(coalesce(string_agg(ctid::text || ':' || xmin::text, ',' "
                    f"ORDER BY ctid), '')) FROM {ident(name)}"
                )
                physical.update(f"{name}:{cur.fetchone()}".encode())
            digest = physical.hexdigest()
            logical = self._store.logical.get(digest, lambda: _logical(cur, tables))
            conn.rollback()
        return Fingerprint(logical=logical, physical=digest)

    def teardown(self) -> None:
        self._store.drop(self.store_id)


class PostgresStore(Store):
    """Per-item databases and SELECT-only roles on a PostgreSQL server."""

    name = "postgres"
    capabilities = StoreCapabilities(
        sandbox_mount="none",
        read_only="role",
        dialect="postgres",
        server="PostgreSQL",
        denies_grants=True,
        reads_sqlite_file=False,
    )

    def __init__(self, workdir: Path, *, statement_timeout_s: float | None = None) -> None:
        super().__init__(workdir, statement_timeout_s=statement_timeout_s)
        self.dsn = os.environ.get("BACKINTEL_PG_DSN", DEFAULT_DSN).strip() or DEFAULT_DSN
        self._cluster: ThrowawayCluster | None = None
        if self.dsn == INITDB:
            self._cluster = ThrowawayCluster()
        self._owner = Owner.current()
        self._token = secrets.token_hex(4)
        self._host = self._owner.host
        self.owner_role = f"bi_{self._token}_own"
        """The NOLOGIN role that owns every database of this store (made on first use)."""
        self._owner_role_made = False
        self._lock = threading.Lock()
        self.logical = LogicalCache()
        """Logical fingerprints by physical hash, for this process (`fingerprint`)."""

    @property
    def comment(self) -> str:
        """The owner (`stores.owner.Owner.comment`) every database and role of this process
        carries."""
        return self._owner.comment(self._token)

    def _admin(self) -> Any:
        import psycopg

        try:
            return psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
        except psycopg.Error as exc:
            raise StoreError(
                f"postgres store: cannot reach the server at {self.dsn} ({exc}); start it or set "
                "BACKINTEL_PG_DSN"
            ) from exc

    def setup_session(self) -> None:
        super().setup_session()
        if self._cluster is not None and self._cluster.root is None:
            self.dsn = self._cluster.start()
        sweep_stale(self.dsn)

    def teardown_session(self) -> None:
        if self._cluster is not None:
            self._cluster.stop()
            self.dsn = INITDB
            return
        with self._admin() as admin:
            rows = admin.execute(
                "SELECT datname FROM pg_database WHERE shobj_description(oid, 'pg_database') = %s "
                "OR datdba = (SELECT oid FROM pg_roles WHERE rolname = %s)",
                (self.comment, self.owner_role),
            ).fetchall()
        for (name,) in rows:
            self.drop(str(name))
        with self._admin() as admin:
            admin.execute(f"DROP ROLE IF EXISTS {ident(self.owner_role)}")
        self._owner_role_made = False

    def _mark_owner(self, admin: Any) -> None:
        """Create this process's owner role with its comment, atomically, once."""
        with self._lock:
            if self._owner_role_made:
                return
            with admin.transaction():
                owner = ident(self.owner_role)
                admin.execute(f"CREATE ROLE {owner} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
                admin.execute(f"COMMENT ON ROLE {owner} IS '{self.comment}'")
            self._owner_role_made = True

    def provision(self, dataset: DatasetFiles) -> ProvisionedPostgres:
        adbc = adbc_module()

        store_id = new_store_id()
        db, role = ident(store_id), ident(f"{store_id}_ro")
        timeout_ms = int(self.statement_timeout_s * 1000)
        try:
            with self._admin() as admin:
                self._mark_owner(admin)
                admin.execute(f"CREATE DATABASE {db} OWNER {ident(self.owner_role)}")
                fault_point("postgres-database-created")
                admin.execute(f"COMMENT ON DATABASE {db} IS '{self.comment}'")
                admin.execute(f"REVOKE ALL ON DATABASE {db} FROM PUBLIC")
                with admin.transaction():  # a role never exists without its mark
                    admin.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
                    admin.execute(f"COMMENT ON ROLE {role} IS '{self.comment}'")
                admin.execute(f"ALTER ROLE {role} SET statement_timeout = {timeout_ms}")
                admin.execute(f"ALTER ROLE {role} SET default_transaction_read_only = on")
                admin.execute(f"GRANT CONNECT ON DATABASE {db} TO {role}")
            with adbc.connect(with_db(self.dsn, store_id)) as conn:
                with conn.cursor() as cur:
                    cur.execute("REVOKE ALL ON SCHEMA public FROM PUBLIC")
                    cur.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
                    for path in sorted(dataset.parquet_dir.glob("*.parquet")):
                        table = pq.read_table(path)
                        cols = ", ".join(f"{ident(f.name)} {pg_type(f.type)}" for f in table.schema)
                        cur.execute(f"CREATE TABLE {ident(path.stem)} ({cols})")
                        if table.num_rows:
                            cur.adbc_ingest(path.stem, table, mode="append")
                    cur.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
                    for table in dataset.denied:  # a missing grant, for real
                        cur.execute(f"REVOKE SELECT ON {ident(table)} FROM {role}")
                conn.commit()
        except Exception as exc:
            self.drop(store_id)
            if isinstance(exc, StoreError):
                raise
            raise StoreError(f"postgres store: provisioning {store_id} failed: {exc}") from exc
        return ProvisionedPostgres(self, store_id)

    def drop(self, store_id: str) -> None:
        """Drop the item's database and role; missing ones are fine."""
        with self._admin() as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {ident(store_id)} WITH (FORCE)")
            admin.execute(f"DROP ROLE IF EXISTS {ident(store_id + '_ro')}")
