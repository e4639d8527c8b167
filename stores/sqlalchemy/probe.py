"""Data probes of a SQLAlchemy item: every table served perturbed, as views.

MariaDB has no temporary views (and an analyst's connection could not see another session's),
so a probe is a database `<item id>_p<salt>` of views over the item's source, made by the
admin, that the item's user may SELECT and nothing more. Each view drops the rows of one hash
bucket (by `salt`), repeats those of another and adds the first row twice, so every non-empty
table moves (its rows as a multiset differ: the dropped and repeated buckets are disjoint),
and minima, maxima and distinct values move with the dropped rows.
"""

from __future__ import annotations

from typing import Protocol

import sqlalchemy as sa

from stores.base import Fingerprint, ProvisionedStore, StoreError, StoreSession
from stores.owner import Owner
from stores.sqlalchemy.admin import MySQLAdmin
from stores.sqlalchemy.session import SQLAlchemySession


class _Store(Protocol):
    @property
    def admin(self) -> MySQLAdmin: ...

    @property
    def role(self) -> tuple[str, str] | None: ...

    @property
    def statement_timeout_s(self) -> float: ...


class _Item(Protocol):
    """What a probe needs of its item (`stores.sqlalchemy.store.SQLAlchemyItem`)."""

    @property
    def store(self) -> _Store: ...

    store_id: str
    database: str
    reader: sa.URL

    @property
    def display_id(self) -> str: ...


__all__ = ["SQLAlchemyProbe", "make_probe"]

BUCKETS = 3


def make_probe(item: _Item, salt: int) -> SQLAlchemyProbe:
    admin = item.store.admin
    name = f"{item.store_id}_p{salt}"
    q = admin.quote
    try:
        admin.create_database(name, Owner.current(), "probe")
        with admin.engine.connect() as conn:
            columns = conn.execute(
                sa.text(
                    "SELECT table_name, column_name FROM information_schema.columns "
                    "WHERE table_schema = :db ORDER BY table_name, ordinal_position"
                ),
                {"db": item.database},
            ).all()
        by_table: dict[str, list[str]] = {}
        for table, column in columns:
            by_table.setdefault(str(table), []).append(q(str(column)))
        statements = []
        for table, cols in sorted(by_table.items()):
            source = f"{q(item.database)}.{q(table)}"
            listed = ", ".join(cols)
            hashed = f"CRC32(CONCAT_WS('|', {listed}))"
            first = f"(SELECT {listed} FROM {source} ORDER BY {listed} LIMIT 1)"
            statements.append(
                f"CREATE SQL SECURITY DEFINER VIEW {q(name)}.{q(table)} AS "
                f"SELECT {listed} FROM {source} WHERE MOD({hashed} + {salt}, {BUCKETS}) <> 0 "
                f"UNION ALL SELECT {listed} FROM {source} "
                f"WHERE MOD({hashed} + {salt} + 1, {BUCKETS}) = 0 "
                f"UNION ALL {first} UNION ALL {first}"
            )
        admin.run(*statements)
        if item.store.role is None:
            admin.grant_select(item.store_id, name)
    except sa.exc.SQLAlchemyError as exc:
        admin.drop(None, [name])
        raise StoreError(f"could not build the probe of {item.display_id}: {exc}") from None
    reader = item.reader.set(database=name)
    return SQLAlchemyProbe(item, name, reader)


class SQLAlchemyProbe(ProvisionedStore):
    """The perturbed views of one item, read as the item's user; never fingerprinted."""

    backend = "sqlalchemy"

    def __init__(self, item: _Item, store_id: str, reader: sa.URL) -> None:
        self.item = item
        self.store_id = store_id
        self._engine = sa.create_engine(reader, poolclass=sa.pool.NullPool)
        self.owner: ProvisionedStore | None = None
        """The item made only for this probe (`SQLAlchemyStore.provision_probe`)."""

    def connect(self) -> StoreSession:
        return SQLAlchemySession(self._engine, self.item.store.statement_timeout_s, "mysql")

    def fingerprint(self) -> Fingerprint:
        raise StoreError("a data probe is read through views and is not fingerprinted")

    def teardown(self) -> None:
        self._engine.dispose()
        self.item.store.admin.run(
            f"DROP DATABASE IF EXISTS {self.item.store.admin.quote(self.store_id)}"
        )
