"""`postgres` for a user's existing database: a clone per item, the source never written.

`CREATE DATABASE bi_<hex> TEMPLATE <source>` copies every table, type, constraint, index and
row at the storage level; the item then gets the same SELECT-only role, comment and teardown as
the `postgres` backend's own databases (`stores.postgres`). The admin connection is the
source's DSN with the database swapped for `postgres`.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from stores.base import DatasetFiles, Fingerprint, StoreError, new_store_id
from stores.pg_conn import ident, with_db
from stores.postgres import PostgresStore, ProvisionedPostgres

__all__ = ["PostgresCloneStore"]


class PostgresCloneStore(PostgresStore):
    """A user's existing database, cloned per item (`CREATE DATABASE ... TEMPLATE source`), so
    every type, NULL, constraint and index is as in the source and the source is never
    written. PostgreSQL clones a database only while no other session is connected to it:
    close other connections to the source during a run (a busy source is retried briefly)."""

    CLONE_ATTEMPTS = 20

    def __init__(
        self, workdir: Path, source_dsn: str, *, statement_timeout_s: float | None = None
    ) -> None:
        super().__init__(workdir, statement_timeout_s=statement_timeout_s)
        self.source_db = urlsplit(source_dsn).path.lstrip("/")
        if not self.source_db:
            raise StoreError(f"postgres source {source_dsn!r} names no database (…/<dbname>)")
        self.dsn = with_db(source_dsn, "postgres")
        self._cluster = None

    def source_fingerprint(self) -> Fingerprint:
        """The source database's own fingerprint (read only; nothing is created in it)."""
        return ProvisionedPostgres(self, self.source_db).fingerprint()

    def provision(self, dataset: DatasetFiles) -> ProvisionedPostgres:
        import time

        import psycopg

        store_id = new_store_id()
        db, role = ident(store_id), ident(f"{store_id}_ro")
        timeout_ms = int(self.statement_timeout_s * 1000)
        try:
            with self._admin() as admin:
                for attempt in range(self.CLONE_ATTEMPTS):
                    try:
                        admin.execute(f"CREATE DATABASE {db} TEMPLATE {ident(self.source_db)}")
                        break
                    except psycopg.errors.ObjectInUse:
                        if attempt == self.CLONE_ATTEMPTS - 1:
                            raise StoreError(
                                f"postgres source {self.source_db!r} has other sessions "
                                "connected; PostgreSQL clones a database only when nobody "
                                "else is connected to it: close them and run again"
                            ) from None
                        time.sleep(0.25)
                admin.execute(f"COMMENT ON DATABASE {db} IS '{self.comment}'")
                admin.execute(f"REVOKE ALL ON DATABASE {db} FROM PUBLIC")
                admin.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
                admin.execute(f"ALTER ROLE {role} SET statement_timeout = {timeout_ms}")
                admin.execute(f"ALTER ROLE {role} SET default_transaction_read_only = on")
                admin.execute(f"GRANT CONNECT ON DATABASE {db} TO {role}")
            with psycopg.connect(with_db(self.dsn, store_id), autocommit=True) as conn:
                conn.execute("REVOKE ALL ON SCHEMA public FROM PUBLIC")
                conn.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
                conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
        except Exception as exc:
            self.drop(store_id)
            if isinstance(exc, StoreError):
                raise
            raise StoreError(
                f"postgres store: cloning {self.source_db!r} as {store_id} failed: {exc}"
            ) from exc
        return ProvisionedPostgres(self, store_id)
