"""The SQLAlchemy store: a server reached by URL, an item per database, a SELECT-only user.

Two ways to get an item's data: `provision` loads the dataset's Parquet into a fresh database
`bi_<hex>` (the registered backend, what the conformance suite runs); a store bound to a
source of your own (`SQLAlchemyStore.bound(url)`) uses the URL's database in place and makes
only the user (and its database `bi_<hex>` of probe views, which also records its owner). The
URL's user administers (creates the databases and users); with `role=` a reader of yours is
used instead and nothing is created.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import threading
from pathlib import Path
from typing import ClassVar

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from stores.base import (
    DatasetFiles,
    Fingerprint,
    ProvisionedStore,
    Store,
    StoreError,
    StoreSession,
    new_store_id,
)
from stores.owner import Owner
from stores.sqlalchemy.admin import MySQLAdmin, admin_for
from stores.sqlalchemy.probe import make_probe
from stores.sqlalchemy.session import SQLAlchemySession

__all__ = ["URL_ENV", "SQLAlchemyItem", "SQLAlchemyStore", "redact_url"]

URL_ENV = "BACKINTEL_SQLALCHEMY_URL"
IN_PLACE = "in-place:"
STORE_FILE = ".backintel-store.json"
"""Names this store's server (the URL, password included: mode 0600) for `backintel clean`."""
SQLGLOT = {"mysql": "mysql", "mariadb": "mysql", "postgresql": "postgres", "mssql": "tsql"}


def redact_url(url: str) -> str:
    """`url` without its password, for messages and folder names."""
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "<not a SQLAlchemy URL>"


class SQLAlchemyStore(Store):
    """A database server reached through SQLAlchemy (`sqlalchemy:<url>`, or the URL in
    `BACKINTEL_SQLALCHEMY_URL`)."""

    name: ClassVar[str] = "sqlalchemy"
    dialect: ClassVar[str] = "mysql"
    url: ClassVar[str | None] = None
    """The server (and, bound, the source database); None: read `URL_ENV` at setup."""
    in_place: ClassVar[bool] = False
    role: ClassVar[tuple[str, str] | None] = None
    """A reader of yours (user, password) used instead of a per-item user."""

    def __init__(self, workdir: Path, *, statement_timeout_s: float | None = None) -> None:
        super().__init__(workdir, statement_timeout_s=statement_timeout_s)
        self._engine: sa.Engine | None = None
        self._admin: MySQLAdmin | None = None
        self._token = secrets.token_hex(4)
        self._lock = threading.Lock()

    @classmethod
    def with_options(cls, options: str) -> type[SQLAlchemyStore]:
        """`sqlalchemy:<url>`: the store on that server (items loaded from Parquet);
        `sqlalchemy:in-place:<url>`: the URL's database served in place."""
        if options.startswith(IN_PLACE):
            return cls.bound(options.removeprefix(IN_PLACE))
        return type(cls.__name__, (cls,), {"url": options})

    @classmethod
    def bound(cls, url: str, role: tuple[str, str] | None = None) -> type[SQLAlchemyStore]:
        """The store serving the URL's database in place (a source of your own)."""
        return type(cls.__name__, (cls,), {"url": url, "in_place": True, "role": role})

    # -- session -------------------------------------------------------------------------
    def setup_session(self) -> None:
        super().setup_session()
        url = self.url or os.environ.get(URL_ENV, "").strip()
        if not url:
            raise StoreError(
                f"the sqlalchemy store needs a database URL: write sqlalchemy:<url> or set "
                f"{URL_ENV} (e.g. mysql+pymysql://root@127.0.0.1:3306/test)"
            )
        try:
            engine = sa.create_engine(url, poolclass=NullPool)
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
        except (sa.exc.SQLAlchemyError, ImportError, ValueError) as exc:
            raise StoreError(f"cannot reach {redact_url(url)}: {exc}") from None
        self._engine = engine
        self._admin = admin_for(engine)
        self._url = url
        marker = self.workdir / STORE_FILE  # for `backintel clean` after this process dies
        marker.write_text(json.dumps({"spec": f"sqlalchemy:{url}"}))
        marker.chmod(0o600)
        if self.in_place and not engine.url.database:
            raise StoreError(f"{redact_url(url)} names no database to use in place")
        self.sweep()

    def sweep(self) -> list[str]:
        """Drop the items of runs whose process is gone (a SIGKILLed session's)."""
        return self.admin.sweep(self.admin.stale_items())

    @property
    def engine(self) -> sa.Engine:
        if self._engine is None:
            raise StoreError("the sqlalchemy store's session is not set up")
        return self._engine

    @property
    def admin(self) -> MySQLAdmin:
        if self._admin is None:
            raise StoreError("the sqlalchemy store's session is not set up")
        return self._admin

    def teardown_session(self) -> None:
        """Drop every item this store made and not yet tore down."""
        if self._admin is not None:
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                self._admin.sweep(self._admin.items_of(self._token))
        if self._engine is not None:
            self._engine.dispose()

    # -- items ---------------------------------------------------------------------------
    def provision(self, dataset: DatasetFiles) -> SQLAlchemyItem:
        store_id = new_store_id()
        admin = self.admin
        try:
            admin.create_database(store_id, Owner.current(), self._token)
            if self.in_place:
                source = str(self.engine.url.database)
            else:
                source = store_id
                admin.load_parquet(store_id, dataset.parquet_dir)
            if self.role is not None:
                user, password = self.role
            else:
                user, password = store_id, admin.create_reader(store_id, [source, store_id])
        except (sa.exc.SQLAlchemyError, OSError) as exc:
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                admin.drop(store_id, [store_id])
            raise StoreError(f"could not provision {dataset.name!r}: {exc}") from None
        reader = self.engine.url.set(username=user, password=password, database=source)
        return SQLAlchemyItem(self, store_id, source, reader)

    def provision_probe(self, dataset: DatasetFiles, salt: int) -> ProvisionedStore:
        """The evidence probe of `dataset`: an item of its own whose views move every table
        (`SQLAlchemyItem.probe`); tearing the probe down tears the item down."""
        item = self.provision(dataset)
        try:
            probe = item.probe(salt)
        except StoreError:
            item.teardown()
            raise
        probe.owner = item  # type: ignore[attr-defined]
        return probe


class SQLAlchemyItem(ProvisionedStore):
    """One item: its source database read by its own SELECT-only user."""

    backend = "sqlalchemy"

    def __init__(
        self, store: SQLAlchemyStore, store_id: str, database: str, reader: sa.URL
    ) -> None:
        self.store = store
        self.store_id = store_id
        self.database = database
        self.reader = reader
        self._engine: sa.Engine | None = sa.create_engine(reader, poolclass=NullPool)
        self.probes: list[ProvisionedStore] = []

    def connect(self) -> StoreSession:
        if self._engine is None:
            raise StoreError(f"{self.display_id} was torn down")
        dialect = SQLGLOT.get(self._engine.dialect.name, self._engine.dialect.name)
        try:
            return SQLAlchemySession(self._engine, self.store.statement_timeout_s, dialect)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"cannot connect to {self.display_id}: {exc}") from None

    def fingerprint(self) -> Fingerprint:
        try:
            logical, physical = self.store.admin.signature(self.database)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"cannot fingerprint {self.display_id}: {exc}") from None
        return Fingerprint(logical, physical)

    def probe(self, salt: int) -> ProvisionedStore:
        """A perturbed view of every table in a database `<id>_p<salt>` this item's user may
        read but not write (MariaDB has no temporary views, and an analyst's connection could
        not see another session's)."""
        probe = make_probe(self, salt)
        self.probes.append(probe)
        return probe

    def teardown(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.dispose()
        databases = [self.store_id] + [p.store_id for p in self.probes]  # never a source
        with contextlib.suppress(StoreError, sa.exc.SQLAlchemyError):
            admin = self.store.admin
            if self.store.role is None:
                admin.drop(self.store_id, databases)
            else:
                admin.run(*[f"DROP DATABASE IF EXISTS {admin.quote(d)}" for d in databases])
