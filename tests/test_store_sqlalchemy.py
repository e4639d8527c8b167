"""The SQLAlchemy store on MariaDB through the conformance suite, as a package written from
outside runs it, plus what only this store has: privileges as the guard and the sweep of a
killed run's users.

The server is `BACKINTEL_SQLALCHEMY_URL` (CI: `mysql+pymysql://root@127.0.0.1:3306/test`); unset,
the store skips, or fails when `sqlalchemy` is in `BACKINTEL_REQUIRE`.
"""

from __future__ import annotations

import os
from pathlib import Path

import sqlalchemy as sa

from stores.base import ProvisionedStore, Store
from stores.conformance import StoreCase
from stores.conformance.suite import *  # noqa: F403
from stores.sqlalchemy import SQLAlchemyItem
from stores.sqlalchemy.store import URL_ENV

URL = os.environ.get(URL_ENV, "mysql+pymysql://root@127.0.0.1:3306/test?charset=utf8mb4")


def _admin(store: Store) -> sa.Engine:
    return store.engine  # type: ignore[attr-defined,no-any-return]


def tamper(item: ProvisionedStore) -> None:
    """Delete order 1 as the server's admin, behind the store."""
    assert isinstance(item, SQLAlchemyItem)
    with item.store.engine.begin() as conn:
        conn.execute(sa.text(f"DELETE FROM `{item.database}`.orders WHERE id = 1"))


def leftover(store: Store, store_id: str, mount: Path | None, workdir: Path) -> bool:
    """The item's database or user is still on the server."""
    with _admin(store).connect() as conn:
        dbs = conn.execute(sa.text("SHOW DATABASES LIKE :n"), {"n": store_id}).all()
        users = conn.execute(
            sa.text("SELECT user FROM mysql.user WHERE user = :n"), {"n": store_id}
        ).all()
    return bool(dbs or users)


CONFORMANCE_STORES = [
    StoreCase(f"sqlalchemy:{URL}", id="sqlalchemy-mariadb", tamper=tamper, leftover=leftover)
]
