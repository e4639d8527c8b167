"""TPC-H's build, streamed by parts: each `dbgen` part is sorted and appended to the Parquet
files, so no table is ever whole in memory nor sorted as a whole. The SQLite file is written
from the Parquet files afterwards (`write_sqlite`), when a store or a check first needs it.

`dbgen`'s parts (`children`/`step`) hold the same rows as one call, and each part's keys lie
above the previous part's in every table (region and nation are in the first parts only, the
other parts hold none of them): sorting each part and appending gives the rows in key order.
`write_part` checks it and refuses a part that would break it.
"""

from __future__ import annotations

import math
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stores.engine.extensions import load_extensions

__all__ = [
    "BUILD_MEMORY",
    "BUILD_PARTS",
    "BUILD_THREADS",
    "ROW_GROUP_ROWS",
    "TABLES",
    "BuiltTables",
    "KeyOrderError",
    "ParquetAppender",
    "build_parts",
    "build_tables",
    "connect",
    "index_sqlite",
    "write_part",
    "write_sqlite",
]

TABLES: dict[str, tuple[str, ...]] = {
    "region": ("r_regionkey",),
    "nation": ("n_nationkey",),
    "supplier": ("s_suppkey",),
    "customer": ("c_custkey",),
    "part": ("p_partkey",),
    "partsupp": ("ps_partkey", "ps_suppkey"),
    "orders": ("o_orderkey",),
    "lineitem": ("l_orderkey", "l_linenumber"),
}
"""Table -> primary key (also the row order of the canonical Parquet and of the SQLite file)."""

BUILD_PARTS = 32
"""`dbgen` parts per unit of scale factor, so a part is the same size at any scale: SF1 peaks
at about 680 MB of resident memory in 32 parts, 800 MB in 16 (the same CPU)."""
BUILD_MEMORY = "200MB"
"""DuckDB's memory limit while building a part: what does not fit is spilled to disk."""
BUILD_THREADS = 1
"""DuckDB's threads while building. A build runs beside the items that do not need it
(`WorldBuilds.prefetch`), so one thread: SF1 then takes 35 s of CPU and peaks at 680 MB of
resident memory (42 s and 510 MB when every table was generated whole into a DuckDB file and
sorted twice, once for Parquet and once for SQLite)."""
ROW_GROUP_ROWS = 122_880
"""Rows per Parquet row group (DuckDB's own, which the build used to write)."""


class KeyOrderError(RuntimeError):
    """A `dbgen` part whose keys do not all lie above the rows already written."""


def connect(spill: Path | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with `tpch` and `sqlite_scanner`; given `spill`, a build's: one
    thread, `BUILD_MEMORY`, spilling into `spill`."""
    conn = duckdb.connect(
        ":memory:",
        config={"autoload_known_extensions": "false", "autoinstall_known_extensions": "false"},
    )
    load_extensions(conn, ["tpch", "sqlite_scanner"])
    if spill is not None:
        conn.execute(f"SET memory_limit = '{BUILD_MEMORY}'")
        conn.execute(f"SET threads = {BUILD_THREADS}")
        conn.execute(f"SET temp_directory = '{spill}'")
    return conn


def build_parts(sf: str) -> int:
    """How many `dbgen` parts a build of `sf` takes: `BUILD_PARTS` per unit of scale factor,
    rounded up (one at SF0.01, where each part would cost `dbgen` about 0.1 s of setup)."""
    return max(1, math.ceil(BUILD_PARTS * float(sf)))


class ParquetAppender:
    """One Parquet file written part by part in full row groups of `ROW_GROUP_ROWS`, as DuckDB
    wrote it whole (the rows short of a group wait for the next part), DECIMAL as INT64."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        self._writer = pq.ParquetWriter(path, schema, store_decimal_as_integer=True)
        self._pending = schema.empty_table()

    def append(self, rows: pa.Table) -> None:
        """Write `rows` after the rows appended before, whole row groups only."""
        pending = pa.concat_tables([self._pending, rows])
        full = len(pending) - len(pending) % ROW_GROUP_ROWS
        if full:
            self._writer.write_table(pending.slice(0, full), row_group_size=ROW_GROUP_ROWS)
        rest = pending.slice(full)  # a copy: a slice of DuckDB's arrays holds its whole result
        self._pending = rest.take(np.arange(len(rest)))

    def close(self) -> None:
        """Write the last, short row group and close the file."""
        if len(self._pending):
            self._writer.write_table(self._pending, row_group_size=ROW_GROUP_ROWS)
        self._writer.close()


def _key(rows: pa.Table, key: tuple[str, ...], index: int) -> tuple[Any, ...]:
    return tuple(rows.column(column)[index].as_py() for column in key)


class BuiltTables:
    """The build's outputs, table by table: Parquet appenders, last keys and row counts."""

    def __init__(self, parquet_dir: Path) -> None:
        self.parquet_dir = parquet_dir
        self.appenders: dict[str, ParquetAppender] = {}
        self.last_keys: dict[str, tuple[Any, ...]] = {}
        self.counts: dict[str, int] = {}

    def close(self) -> None:
        for appender in self.appenders.values():
            appender.close()


def _append_table(
    conn: duckdb.DuckDBPyConnection, out: BuiltTables, table: str, key: tuple[str, ...]
) -> None:
    """Append the part's `table`, sorted by `key`, to its Parquet file, a row group at a time."""
    out.counts.setdefault(table, 0)
    order = ", ".join(key)
    reader = conn.execute(f"SELECT * FROM {table} ORDER BY {order}").to_arrow_reader(ROW_GROUP_ROWS)
    if table not in out.appenders:
        path = out.parquet_dir / f"{table}.parquet"
        out.appenders[table] = ParquetAppender(path, reader.schema)
    for batch in reader:
        rows = pa.Table.from_batches([batch])
        if not len(rows):
            continue
        if table in out.last_keys and _key(rows, key, 0) <= out.last_keys[table]:
            raise KeyOrderError(
                f"a dbgen part of {table} starts at key {_key(rows, key, 0)}, not above the "
                f"last key written {out.last_keys[table]}: its parts cannot just be appended"
            )
        out.appenders[table].append(rows)
        out.last_keys[table] = _key(rows, key, len(rows) - 1)
        out.counts[table] += len(rows)


def write_part(conn: duckdb.DuckDBPyConnection, out: BuiltTables) -> None:
    """Append the `dbgen` part in `conn` to the Parquet files, each table sorted by its key;
    then drop its tables."""
    for table, key in TABLES.items():
        _append_table(conn, out, table, key)
    for table in TABLES:
        conn.execute(f"DROP TABLE {table}")


def build_tables(sf: str, parquet_dir: Path, spill: Path) -> dict[str, int]:
    """Write every table of TPC-H at `sf` into `parquet_dir`, one `dbgen` part at a time
    (DuckDB spilling into `spill`, removed after); each table's row count."""
    parts = build_parts(sf)
    out = BuiltTables(parquet_dir)
    conn = connect(spill)
    try:
        for step in range(parts):
            conn.execute(f"CALL dbgen(sf={sf}, children={parts}, step={step})")
            write_part(conn, out)
    finally:
        out.close()
        conn.close()
        shutil.rmtree(spill, ignore_errors=True)
    return out.counts


def _sqlite_columns(conn: duckdb.DuckDBPyConnection, source: str) -> str:
    """The select list for the SQLite file: DECIMAL as DOUBLE (SQLite would keep it as text);
    DATE stays DATE, which DuckDB's SQLite writer stores as 'YYYY-MM-DD' text."""
    cols = conn.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()
    return ", ".join(
        f"CAST({c[0]} AS DOUBLE) AS {c[0]}" if str(c[1]).startswith("DECIMAL") else str(c[0])
        for c in cols
    )


def write_sqlite(parquet_dir: Path, sqlite_path: Path, spill: Path) -> None:
    """The tables of `parquet_dir` (in key order) as the SQLite file `sqlite_path`, through
    DuckDB's SQLite writer on one thread in bounded memory, with `index_sqlite`'s indexes."""
    conn = connect(spill)
    try:
        conn.execute(f"ATTACH '{sqlite_path}' AS lite (TYPE sqlite)")
        for table in TABLES:
            source = f"read_parquet('{(parquet_dir / f'{table}.parquet').resolve()}')"
            columns = _sqlite_columns(conn, source)
            conn.execute(f"CREATE TABLE lite.{table} AS SELECT {columns} FROM {source}")
        conn.execute("DETACH lite")
    finally:
        conn.close()
        shutil.rmtree(spill, ignore_errors=True)
    index_sqlite(sqlite_path)


def index_sqlite(path: Path) -> None:
    """Unique indexes on the primary keys (and orders by customer), so SQLite check queries
    join by index instead of building automatic indexes over millions of rows each time."""
    con = sqlite3.connect(path)
    try:
        for table, key in TABLES.items():
            con.execute(f"CREATE UNIQUE INDEX {table}_pk ON {table} ({', '.join(key)})")
        con.execute("CREATE INDEX orders_custkey ON orders (o_custkey)")
        con.commit()
    finally:
        con.close()
