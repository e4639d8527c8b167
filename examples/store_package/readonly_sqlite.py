"""A store written outside BackIntel, against its public interface only (`stores.base`): each
item is a SQLite file loaded from the dataset's Parquet, read through a read-only connection
whose authorizer allows nothing but reads."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from datetime import datetime
from decimal import Decimal
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
    QueryRefused,
    QueryResult,
    QueryTimeout,
    Store,
    StoreError,
    StoreSession,
    TableInfo,
    new_store_id,
)

READS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}


class ReadOnlySQLiteStore(Store):
    name = "readonly-sqlite"
    dialect = "sqlite"

    def provision(self, dataset: DatasetFiles) -> ProvisionedStore:
        store_id = new_store_id()
        path = self.workdir / f"{store_id}.sqlite"
        with sqlite3.connect(path) as conn:
            for table in dataset.tables:
                data = pq.read_table(dataset.parquet_dir / f"{table}.parquet")
                columns = ", ".join(f"{f.name} {_affinity(f.type)}" for f in data.schema)
                conn.execute(f"CREATE TABLE {table} ({columns})")
                rows = [tuple(_plain(v) for v in r.values()) for r in data.to_pylist()]
                marks = ", ".join("?" * data.num_columns)
                conn.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
        conn.close()
        path.chmod(0o444)
        return Item(self, store_id, path)


def _affinity(t: pa.DataType) -> str:
    if pa.types.is_integer(t):
        return "INTEGER"
    return "REAL" if pa.types.is_floating(t) or pa.types.is_decimal(t) else "TEXT"


def _plain(value: object) -> object:
    """What SQLite keeps: DECIMAL as a float, dates and timestamps as ISO text."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    return value if isinstance(value, int | float | str | bytes | None) else str(value)


class Item(ProvisionedStore):
    backend = "readonly-sqlite"

    def __init__(self, store: ReadOnlySQLiteStore, store_id: str, path: Path) -> None:
        self.store, self.store_id, self.path = store, store_id, path

    @property
    def mount_path(self) -> Path:
        return self.path

    def connect(self) -> StoreSession:
        if not self.path.exists():
            raise StoreError(f"{self.display_id} was torn down")
        return Session(self.path, self.store.statement_timeout_s)

    def fingerprint(self) -> Fingerprint:
        logical = hashlib.sha256()
        with self.connect() as session:
            for table in session.list_tables():
                rows = session.run_sql(f"SELECT * FROM {table}", max_rows=10**9).rows
                logical.update(repr(sorted(map(repr, rows))).encode())
        return Fingerprint(logical.hexdigest(), hashlib.sha256(self.path.read_bytes()).hexdigest())

    def teardown(self) -> None:
        self.path.unlink(missing_ok=True)


def _reads_only(action: int, arg1: str | None, *_: object) -> int:
    """Allow reads and `PRAGMA table_info`, deny everything else."""
    if action in READS or (action == sqlite3.SQLITE_PRAGMA and arg1 == "table_info"):
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


class Session(StoreSession):
    def __init__(self, path: Path, timeout_s: float) -> None:
        self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self.conn.set_authorizer(_reads_only)
        self.timeout_s = timeout_s

    def list_tables(self) -> list[str]:
        rows = self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return sorted(r[0] for r in rows)

    def describe_table(self, name: str) -> TableInfo:
        if name not in self.list_tables():
            raise QueryError(f"no table {name!r}")
        info = self.conn.execute(f"PRAGMA table_info({name})").fetchall()
        columns = [Column(r[1], r[2]) for r in info]
        (count,) = self.conn.execute(f"SELECT count(*) FROM {name}").fetchone()
        return TableInfo(name, columns, count)

    def run_sql(
        self, sql: str, max_rows: int = MAX_ROWS, max_bytes: int = MAX_RESULT_BYTES
    ) -> QueryResult:
        if not sql.lstrip().upper().startswith(("SELECT", "WITH")):
            raise QueryRefused("only a SELECT may run here")
        deadline = time.monotonic() + self.timeout_s
        self.conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        try:
            cursor = self.conn.execute(sql)
            rows = cursor.fetchmany(max_rows + 1)
        except sqlite3.DatabaseError as exc:
            text = str(exc)
            if "interrupted" in text:
                raise QueryTimeout(text) from None
            if "not authorized" in text or "one statement" in text or "readonly" in text:
                raise QueryRefused(text) from None
            raise QueryError(text) from None
        except sqlite3.Warning as exc:  # several statements in one text
            raise QueryRefused(str(exc)) from None
        columns = [d[0] for d in cursor.description or []]
        return QueryResult(columns, rows[:max_rows], len(rows) > max_rows, max_rows)

    def close(self) -> None:
        self.conn.close()
