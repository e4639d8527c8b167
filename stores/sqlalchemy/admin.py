"""Server administration for the SQLAlchemy store, per dialect family: per-item databases and
SELECT-only users, loading Parquet, the cheap signature, and the sweep of a dead run's items.

Only the MySQL family (MySQL, MariaDB) has a recipe. Every per-item artefact is named after the
item's opaque id (`bi_<hex>`): its database carries the owner in its COMMENT
(`stores.owner.Owner.comment`), which is how a run killed with SIGKILL is swept later.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa

from stores.base import StoreError
from stores.owner import Owner
from stores.sqlalchemy.types import sql_type

__all__ = ["MySQLAdmin", "admin_for"]

FAMILIES = ("mysql", "mariadb")
"""The SQLAlchemy dialect names that have an admin recipe here."""
_BATCH = 2_000


def admin_for(engine: sa.Engine) -> MySQLAdmin:
    """The admin recipe of `engine`'s dialect, or a `StoreError` naming the dialect."""
    name = engine.dialect.name
    if name not in FAMILIES:
        raise StoreError(
            f"the sqlalchemy store has no admin recipe for dialect {name!r} (it has one for "
            f"{', '.join(FAMILIES)}): per-item users and databases cannot be made there"
        )
    return MySQLAdmin(engine)


class MySQLAdmin:
    """Databases, users and grants on a MySQL or MariaDB server, as the URL's (admin) user."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.quote = engine.dialect.identifier_preparer.quote

    def run(self, *statements: str, params: dict[str, Any] | None = None) -> None:
        with self.engine.begin() as conn:
            for sql in statements:
                conn.execute(sa.text(sql), params or {})

    def create_database(self, name: str, owner: Owner, token: str) -> None:
        comment = owner.comment(token).replace("'", "")
        self.run(
            f"CREATE DATABASE {self.quote(name)} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin "
            f"COMMENT '{comment}'"
        )

    def create_reader(self, user: str, databases: Iterable[str]) -> str:
        """A user that may only SELECT (and SHOW VIEW) `databases`; its random password."""
        password = secrets.token_urlsafe(24)
        self.run(
            f"CREATE USER {self.quote(user)}@'%' IDENTIFIED BY :pw",
            params={"pw": password},
        )
        for db in databases:
            self.grant_select(user, db)
        return password

    def grant_select(self, user: str, database: str) -> None:
        self.run(f"GRANT SELECT, SHOW VIEW ON {self.quote(database)}.* TO {self.quote(user)}@'%'")

    def drop(self, user: str | None, databases: Iterable[str]) -> None:
        """Drop `user` (None: no user) and `databases`; what is already gone is no error."""
        statements = [f"DROP USER IF EXISTS {self.quote(user)}@'%'"] if user else []
        statements += [f"DROP DATABASE IF EXISTS {self.quote(db)}" for db in databases]
        self.run(*statements)

    def load_parquet(self, database: str, parquet_dir: Path) -> list[str]:
        """One table per `<table>.parquet` in `database`, types mapped by `sql_type`; then each
        table analysed, so the statistics InnoDB would recalculate in the background seconds
        later (moving `data_length`, part of the physical fingerprint) are final at once."""
        tables = sorted(p.stem for p in parquet_dir.glob("*.parquet"))
        raw = self.engine.raw_connection()
        try:
            cursor = raw.cursor()
            for table in tables:
                data = pq.read_table(parquet_dir / f"{table}.parquet")
                self._load_table(cursor, database, table, data)
            raw.commit()
            for table in tables:
                cursor.execute(f"ANALYZE TABLE {self.quote(database)}.{self.quote(table)}")
                cursor.fetchall()
        finally:
            raw.close()
        return tables

    def _load_table(self, cursor: Any, database: str, table: str, data: pa.Table) -> None:
        target = f"{self.quote(database)}.{self.quote(table)}"
        columns = [
            f"{self.quote(f.name)} {sql_type(f.type, f'{table}.{f.name}')}" for f in data.schema
        ]
        cursor.execute(f"CREATE TABLE {target} ({', '.join(columns)})")
        marks = ", ".join(["%s"] * data.num_columns)
        insert = f"INSERT INTO {target} VALUES ({marks})"
        for batch in data.to_batches(_BATCH):
            rows = [tuple(row.values()) for row in batch.to_pylist()]
            if rows:
                cursor.executemany(insert, rows)

    def tables(self, database: str) -> list[str]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = :db "
                    "ORDER BY table_name"
                ),
                {"db": database},
            )
            return [str(r[0]) for r in rows]

    def signature(self, database: str) -> tuple[str, str]:
        """(logical, physical): columns, row counts and `CHECKSUM TABLE` of every table (a
        content checksum the server computes), and the same with each table's engine data."""
        logical, physical = hashlib.sha256(), hashlib.sha256()
        with self.engine.connect() as conn:
            columns = conn.execute(
                sa.text(
                    "SELECT table_name, column_name, column_type, is_nullable "
                    "FROM information_schema.columns WHERE table_schema = :db "
                    "ORDER BY table_name, ordinal_position"
                ),
                {"db": database},
            ).all()
            logical.update(repr([tuple(r) for r in columns]).encode())
            for table in self.tables(database):
                qualified = f"{self.quote(database)}.{self.quote(table)}"
                count = conn.execute(sa.text(f"SELECT COUNT(*) FROM {qualified}")).scalar()
                checksum = conn.execute(sa.text(f"CHECKSUM TABLE {qualified}")).one()[1]
                logical.update(f"{table}:{count}:{checksum}\n".encode())
                stats = conn.execute(
                    sa.text(
                        "SELECT engine, data_length, index_length FROM information_schema.tables "
                        "WHERE table_schema = :db AND table_name = :t"
                    ),
                    {"db": database, "t": table},
                ).one()
                physical.update(f"{table}:{count}:{checksum}:{tuple(stats)}\n".encode())
        return logical.hexdigest(), physical.hexdigest()

    def stale_items(self) -> list[str]:
        """The per-item databases whose recorded owner process is gone (this host only)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT schema_name, schema_comment FROM information_schema.schemata "
                    "WHERE schema_name LIKE 'bi\\_%'"
                )
            ).all()
        stale = []
        for name, comment in rows:
            owner = Owner.from_comment(comment)
            if owner is not None and owner.is_gone():
                stale.append(str(name))
        return sorted(stale)

    def items_of(self, token: str) -> list[str]:
        """The per-item databases this process made under `token` (its store's)."""
        suffix = f":{token}"
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT schema_name, schema_comment FROM information_schema.schemata "
                    "WHERE schema_name LIKE 'bi\\_%'"
                )
            ).all()
        mine = Owner.current().comment(token)
        return sorted(str(n) for n, c in rows if str(c or "") == mine and mine.endswith(suffix))

    def sweep(self, databases: Iterable[str]) -> list[str]:
        """Drop each item database and the users and probe databases of its item."""
        dropped = []
        for db in databases:
            self.drop(db[: len("bi_") + 12], [db])  # `bi_<hex12>` and `bi_<hex12>_p<salt>`
            dropped.append(db)
        return dropped
