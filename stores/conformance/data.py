"""The conformance suite's data: a small dataset every store provisions (ints, decimals,
floats, unicode text, dates, timestamps, NULLs, text that looks like NULL), the queries whose
answers must match plain DuckDB over its Parquet, the statements every store must refuse, and
the one comparable form of a value (`normalise`)."""

from __future__ import annotations

import re
import sqlite3
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from stores.base import DatasetFiles

__all__ = [
    "FILE_READS",
    "NAMES",
    "QUERIES",
    "REFUSED",
    "SLOW",
    "STATUSES",
    "make_dataset",
    "normalise",
    "normalised",
]

NAMES = ["Zoë", "東京", "🙂 smile", "", None, "O'Brien", 'a,b "q"', "line\nbreak", "\\N", "NULL"]
STATUSES = ["delivered", "shipped", "canceled", "invoiced"]


def make_dataset(
    root: Path, name: str, n_orders: int, extra: bool = False, whole_seconds: bool = False
) -> DatasetFiles:
    """Parquet tables `customers` and `orders` (+ `extra`), and a SQLite file built from them;
    `whole_seconds` for a store whose timestamps hold no fraction of a second."""
    parquet = root / "parquet"
    parquet.mkdir(parents=True)
    customers = pa.table(
        {
            "id": pa.array(range(1, len(NAMES) + 1), pa.int64()),
            "name": pa.array(NAMES, pa.string()),
            "signup": pa.array(
                [date(2023, 11, 1) + timedelta(days=17 * i) if i % 4 else None for i in range(10)],
                pa.date32(),
            ),
            "score": pa.array([None if i == 3 else i * 1.25 - 2 for i in range(10)], pa.float64()),
        }
    )
    orders = pa.table(
        {
            "id": pa.array(range(1, n_orders + 1), pa.int64()),
            "customer_id": pa.array([None if i % 9 == 0 else i % 10 + 1 for i in range(n_orders)]),
            "amount": pa.array(
                [Decimal(i * 37 % 1000 - 100) / 100 for i in range(n_orders)], pa.decimal128(12, 2)
            ),
            "created": pa.array(
                [
                    datetime(2024, 1, 1, 8, 30)
                    + timedelta(hours=7 * i, microseconds=0 if whole_seconds else i)
                    for i in range(n_orders)
                ],
                pa.timestamp("us"),
            ),
            "status": pa.array([STATUSES[i % 4] for i in range(n_orders)]),
        }
    )
    tables = {"customers": customers, "orders": orders}
    if extra:
        tables["extra"] = pa.table({"k": pa.array([1], pa.int32())})
    for table_name, table in tables.items():
        pq.write_table(table, parquet / f"{table_name}.parquet")
    sqlite_path = root / "dataset.sqlite"
    with sqlite3.connect(sqlite_path) as conn:
        for table_name, table in tables.items():
            cols = ", ".join(f"{f.name} {_sqlite_type(f.type)}" for f in table.schema)
            conn.execute(f"CREATE TABLE {table_name} ({cols})")
            rows = [tuple(_sqlite_value(v) for v in r.values()) for r in table.to_pylist()]
            marks = ", ".join("?" * table.num_columns)
            conn.executemany(f"INSERT INTO {table_name} VALUES ({marks})", rows)
    return DatasetFiles(name=name, parquet_dir=parquet, sqlite_path=sqlite_path)


def _sqlite_type(t: pa.DataType) -> str:
    if pa.types.is_integer(t):
        return "INTEGER"
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "REAL"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP"
    return "DATE" if pa.types.is_date(t) else "TEXT"


def _sqlite_value(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, date):
        return value.isoformat()
    return value


_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_STAMP = re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d+)?$")


def normalise(value: Any) -> Any:
    """One comparable form per value: numbers as 6-place decimal text (1 == 1.0 == 1.00),
    dates and timestamps as ISO text (SQLite keeps them as text), NULL stays None."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float | Decimal):
        return str(Decimal(str(value)).quantize(Decimal("0.000001")))
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="microseconds")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str) and _STAMP.match(value):
        return datetime.fromisoformat(value).isoformat(sep=" ", timespec="microseconds")
    return value


def normalised(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [tuple(normalise(v) for v in row) for row in rows]


QUERIES = [
    "SELECT count(*) AS n FROM orders",
    "SELECT status, count(*) AS n, sum(amount) AS total FROM orders "
    "GROUP BY status ORDER BY status",
    "SELECT id, name FROM customers ORDER BY id",
    "SELECT id, signup, score FROM customers WHERE signup >= '2024-01-01' ORDER BY id",
    "SELECT o.id, c.name, o.amount, o.created FROM orders o JOIN customers c "
    "ON c.id = o.customer_id WHERE o.id <= 12 ORDER BY o.id",
    "SELECT count(*) AS n FROM orders WHERE customer_id IS NULL",
    "SELECT min(created) AS lo, max(created) AS hi, min(amount) AS mn FROM orders",
    "SELECT avg(score) AS a, count(score) AS n, count(*) AS m FROM customers",
    "SELECT id FROM customers WHERE name = '' OR name IS NULL ORDER BY id",
]
REFUSED = [
    "INSERT INTO customers (id) VALUES (999)",
    "UPDATE orders SET status = 'x'",
    "DELETE FROM orders",
    "WITH x AS (SELECT 1 AS a) DELETE FROM orders",
    "DROP TABLE orders",
    "CREATE TABLE t2 (a INTEGER)",
    "CREATE TEMP TABLE t3 AS SELECT 1 AS a",
    "CREATE VIEW v2 AS SELECT 1 AS a",
    "ALTER TABLE orders ADD COLUMN z INTEGER",
    "ATTACH DATABASE '/tmp/backintel-evil.db' AS evil",
    "COPY orders TO '/tmp/backintel-evil.csv'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET search_path = 'x'",
    "SELECT 1 AS a; DELETE FROM orders",
]


FILE_READS = [
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT pg_read_file('/etc/passwd') AS f",
    "SELECT LOAD_FILE('/etc/passwd') AS f",
    "SELECT * FROM file('/etc/passwd', 'LineAsString')",
    "SELECT readfile('/etc/passwd') AS f",
]
"""Ways engines read a server-side file; each must fail or return nothing of the file."""
SLOW = (
    "SELECT count(*) AS n FROM orders a, orders b, orders c, orders d, orders e "
    "WHERE a.id + b.id + c.id + d.id + e.id > 7"
)
"""A statement no store finishes within the suite's 1.5 s statement limit."""
