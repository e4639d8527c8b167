"""Writing a case's tables as a byte-reproducible SQLite file and a Parquet folder, and
fingerprinting the SQLite file the way the SQLite store does (logical and physical)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

import polars as pl

from scenarios.acceptance.model import Table, Value
from stores.base import Fingerprint
from stores.registry import load_store_class

__all__ = ["PAGE_SIZE", "fingerprint", "write_parquet", "write_sqlite"]

PAGE_SIZE = 4096
_POLARS = {"INTEGER": pl.Int64, "REAL": pl.Float64, "TEXT": pl.String}


def _cell(value: Value) -> int | float | str | None:
    return float(value) if isinstance(value, Decimal) else value


def _cells(table: Table) -> list[tuple[int | float | str | None, ...]]:
    return [tuple(_cell(v) for v in row) for row in table.rows]


def write_sqlite(tables: Sequence[Table], target: Path) -> None:
    """Create `target` from scratch: fixed page size, rollback journal, tables in name order,
    rows in their declared order, then VACUUM. The same tables give the same bytes."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    tmp.unlink()
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
            conn.execute("PRAGMA journal_mode = DELETE")
            conn.execute("BEGIN")
            for table in sorted(tables, key=lambda t: t.name):
                cols = ", ".join(f'"{name}" {kind}' for name, kind in table.columns)
                conn.execute(f'CREATE TABLE "{table.name}" ({cols})')
                marks = ", ".join("?" for _ in table.columns)
                conn.executemany(f'INSERT INTO "{table.name}" VALUES ({marks})', _cells(table))
            conn.execute("COMMIT")
            conn.execute("VACUUM")
        finally:
            conn.close()
        tmp.chmod(0o644)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_parquet(tables: Sequence[Table], folder: Path) -> None:
    """One `<table>.parquet` per table with the SQLite column types (replaces `folder`)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        for table in tables:
            schema = {name: _POLARS[kind] for name, kind in table.columns}
            frame = pl.DataFrame(_cells(table), schema=schema, orient="row")
            frame.write_parquet(tmp / f"{table.name}.parquet", statistics=False)
        tmp.chmod(0o755)
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fingerprint(db: Path) -> Fingerprint:
    """Logical (tables, schemas, rows) and physical (file bytes) sha256 of a SQLite file."""
    return load_store_class("sqlite").fingerprint_file(db)
