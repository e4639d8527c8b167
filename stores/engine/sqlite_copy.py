"""A SQLite file written from Parquet files: the `sqlite` store's template and the evidence
stage's perturbed copies are built by it (`build_from_parquet`).

Each table is declared with the types `sqlite_file.parquet_column` gives. A file of
`DUCKDB_ROWS` rows or more is copied by DuckDB, outside the GIL and streaming row groups in
bounded memory: it reads the file and writes its rows through its SQLite extension into a
staging table, each column as the SQL expression that gives exactly the value the Python
converter gives (`cell_sql`); SQLite then moves them into the declared table in rowid order, so
types, affinities and row order are the same. A smaller file, or a column DuckDB cannot render
exactly so (`cell_sql` gives None), is written cell by cell in Python.
"""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb

from stores.base import StoreError
from stores.common.sqlite_file import parquet_column, quote_ident
from stores.engine.common import quote_literal
from stores.engine.extensions import load_extensions

__all__ = ["DUCKDB_ROWS", "build_from_parquet", "cell_sql", "copy_rows"]

DUCKDB_ROWS = 200_000
"""Files with fewer rows are written in Python: DuckDB's start (its SQLite extension, the
attach) costs more than converting them."""

COPY_MEMORY = "256MB"
"""DuckDB's memory limit while it copies (it streams row groups; this caps its buffers)."""
STAGE_PREFIX = "backintel_stage_"
"""The staging table's name: the table's own name after this prefix, dropped once moved."""
_EXACT_DECIMAL_DIGITS = 15
"""A decimal of at most this many digits is an integer below 2**53 over a power of ten that
is exact in a double, so DuckDB's division rounds as Python's `float(Decimal)` does."""
_DATES = ("1000-01-01", "9999-12-31")
"""Dates whose four-digit year `strftime` writes as Python's `isoformat` does."""


def build_from_parquet(files: list[Path], dest: Path) -> None:
    """A database with one table per `<table>.parquet` file, written under a private temp name:
    rows copied by DuckDB where the file is large and every column allows (`copy_rows`), else
    cell by cell in Python."""
    import pyarrow.parquet as pq

    if not files:
        raise StoreError(f"cannot build the SQLite database {dest}: no Parquet file to read")
    tmp = dest.with_name(f"{dest.name}.{secrets.token_hex(4)}.tmp")
    try:
        for file in files:
            parquet = pq.ParquetFile(file)
            schema = parquet.schema_arrow
            specs = [parquet_column(f) for f in schema]
            names = [quote_ident(f.name) for f in schema]
            cols = ", ".join(f"{n} {t}".rstrip() for n, (t, _) in zip(names, specs, strict=True))
            with _connection(tmp) as conn:
                conn.execute(f"CREATE TABLE {quote_ident(file.stem)} ({cols})")
            big = parquet.metadata.num_rows >= DUCKDB_ROWS
            if not (big and _copied(file, tmp, [f.name for f in schema])):
                _insert_cells(file, tmp, names, [conv for _, conv in specs])
    except (sqlite3.Error, OSError, StoreError) as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, StoreError):
            raise
        raise StoreError(f"cannot build a SQLite database from {files[0].parent}: {exc}") from exc
    tmp.replace(dest)


@contextlib.contextmanager
def _connection(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection with no journal, its statements in one transaction, closed after."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("BEGIN")
        yield conn
        conn.execute("COMMIT")
    finally:
        conn.close()


def _copied(file: Path, path: Path, columns: list[str]) -> bool:
    """Whether DuckDB copied the rows of `file` (`copy_rows`); False, with nothing
    left behind, when a column needs the Python converter or DuckDB could not do it."""
    try:
        return copy_rows(file, path, file.stem, columns)
    except (duckdb.Error, StoreError):
        with _connection(path) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {quote_ident(STAGE_PREFIX + file.stem)}")
            conn.execute(f"DELETE FROM {quote_ident(file.stem)}")
        return False


def _insert_cells(
    file: Path, path: Path, names: list[str], convert: list[Callable[[Any], object]]
) -> None:
    """Every row of `file` into its table, each cell converted in Python."""
    import pyarrow.parquet as pq

    insert = f"INSERT INTO {quote_ident(file.stem)} VALUES ({', '.join('?' * len(names))})"
    with _connection(path) as conn:
        for batch in pq.ParquetFile(file).iter_batches(batch_size=20_000):
            columns = [
                [conv(v) for v in col.to_pylist()]
                for col, conv in zip(batch.columns, convert, strict=True)
            ]
            conn.executemany(insert, zip(*columns, strict=True))


def cell_sql(name: str, duckdb_type: str) -> str | None:
    """The DuckDB expression for one column's SQLite cell, as `sqlite_file.parquet_column`'s
    converter writes it; None for a type rendered only in Python (times, time zones,
    nanoseconds, unsigned 64-bit integers, wide decimals, nested values)."""
    col = quote_ident(name)
    kind = duckdb_type.upper()
    if kind == "BOOLEAN":
        return f"CAST({col} AS BIGINT)"
    if kind in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER"):
        return f"CAST({col} AS BIGINT)"
    if kind in ("FLOAT", "DOUBLE"):
        return f"CAST({col} AS DOUBLE)"
    if kind.startswith("DECIMAL("):
        digits = int(kind[len("DECIMAL(") :].split(",")[0])
        return f"CAST({col} AS DOUBLE)" if digits <= _EXACT_DECIMAL_DIGITS else None
    if kind == "VARCHAR" or kind == "BLOB":
        return col
    if kind == "DATE":
        return f"strftime({col}, '%Y-%m-%d')"
    if kind == "TIMESTAMP":
        return (
            f"CASE WHEN strftime({col}, '%f') = '000000' THEN strftime({col}, '%Y-%m-%d %H:%M:%S')"
            f" ELSE strftime({col}, '%Y-%m-%d %H:%M:%S.%f') END"
        )
    return None


def _in_year_range(conn: duckdb.DuckDBPyConnection, source: str, dated: list[str]) -> bool:
    """Whether every date or timestamp of `dated` lies in years 1000 to 9999."""
    if not dated:
        return True
    low, high = _DATES
    checks = " AND ".join(
        f"coalesce(min({c}) >= DATE '{low}' AND max({c}) <= DATE '{high}', true)"
        for c in map(quote_ident, dated)
    )
    row = conn.execute(f"SELECT {checks} FROM {source}").fetchone()
    return bool(row and row[0])


def copy_rows(file: Path, sqlite_path: Path, table: str, columns: list[str]) -> bool:
    """Append the rows of the Parquet `file` to `table` (declared with `columns`, in that
    order) of the SQLite file at `sqlite_path`, which no connection is writing; False, with
    nothing written, when a column needs the Python converter."""
    conn = duckdb.connect(
        config={"autoload_known_extensions": "false", "autoinstall_known_extensions": "false"}
    )
    stage = STAGE_PREFIX + table
    try:
        conn.execute(f"SET memory_limit = '{COPY_MEMORY}'")
        source = f"read_parquet({quote_literal(str(file))})"
        described = conn.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()
        names = [str(row[0]) for row in described]
        if names != columns:
            return False  # names DuckDB reads otherwise: the Python path
        cells = [cell_sql(str(row[0]), str(row[1])) for row in described]
        dated = [str(r[0]) for r in described if str(r[1]).upper() in ("DATE", "TIMESTAMP")]
        if any(c is None for c in cells) or not _in_year_range(conn, source, dated):
            return False
        load_extensions(conn, ["sqlite_scanner"])
        conn.execute(f"ATTACH {quote_literal(str(sqlite_path))} AS lite (TYPE sqlite)")
        pairs = zip(cells, names, strict=True)
        select = ", ".join(f"{cell} AS {quote_ident(name)}" for cell, name in pairs)
        conn.execute(f"CREATE TABLE lite.{quote_ident(stage)} AS SELECT {select} FROM {source}")
        conn.execute("DETACH lite")
    finally:
        conn.close()
    lite = sqlite3.connect(sqlite_path, isolation_level=None)
    try:
        lite.execute("PRAGMA journal_mode = OFF")
        moved = f"SELECT * FROM {quote_ident(stage)} ORDER BY rowid"
        lite.execute(f"INSERT INTO {quote_ident(table)} {moved}")
        lite.execute(f"DROP TABLE {quote_ident(stage)}")
    finally:
        with contextlib.suppress(sqlite3.Error):
            lite.close()
    return True
