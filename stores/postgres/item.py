"""One item on a PostgreSQL source used in place (`stores.postgres.source`): its opaque id and
the SELECT-only role its sessions log in as."""

from __future__ import annotations

import threading
from typing import Protocol

from stores.base import Fingerprint, ProvisionedStore, RowCounts, StoreError
from stores.common.dsn import redact
from stores.postgres.session import PostgresSession

__all__ = ["ProvisionedPostgresSource", "SourceOfItems"]


class SourceOfItems(Protocol):
    """What an item asks of the source store that made it."""

    source_dsn: str
    statement_timeout_s: float

    @property
    def where(self) -> str: ...

    def login_dsn(self, role: str, password: str | None) -> str: ...

    def row_counts(self) -> RowCounts | None: ...

    def fingerprint(self) -> Fingerprint: ...

    def drop_role(self, role: str) -> None: ...


class ProvisionedPostgresSource(ProvisionedStore):
    """One item on the source: its opaque id, the role its sessions log in as."""

    backend = "postgres"

    def __init__(
        self, store: SourceOfItems, store_id: str, role: str, password: str | None
    ) -> None:
        self._store = store
        self.store_id = store_id
        self.role = role
        self._password = password
        self._sessions: list[PostgresSession] = []
        self._lock = threading.Lock()
        self._torn_down = False

    @property
    def source_where(self) -> str:
        """The source's DSN as reports show it (no password)."""
        return self._store.where

    def session_dsn(self) -> str:
        """The DSN analyst sessions use (holds the role's password: never print it)."""
        return self._store.login_dsn(self.role, self._password)

    def connect(self) -> PostgresSession:
        if self._torn_down:
            raise StoreError(f"store {self.display_id} is torn down")
        dsn = self.session_dsn()
        try:
            session = PostgresSession(
                dsn, self.display_id, self._store.statement_timeout_s, self._store.row_counts()
            )
        except StoreError as exc:
            raise StoreError(redact(str(exc), dsn, self._store.source_dsn)) from None
        with self._lock:
            self._sessions.append(session)
        return session

    def fingerprint(self) -> Fingerprint:
        return self._store.fingerprint()

    def teardown(self) -> None:
        """Close the item's sessions and drop its role (when the harness made it)."""
        self._torn_down = True
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()
        if self._password is not None:
            self._store.drop_role(self.role)
