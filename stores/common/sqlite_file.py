"""SQLite files from Parquet: the declared type and cell converter of each Arrow column
(`stores.engine.sqlite_copy` writes the files), and what a statement reads."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stores.base import StoreError

__all__ = ["columns_read", "parquet_column", "quote_ident"]


def quote_ident(name: str) -> str:
    """`name` as a double-quoted SQLite identifier."""
    return '"' + name.replace('"', '""') + '"'


def parquet_column(field: Any) -> tuple[str, Callable[[Any], object]]:
    """SQLite declared type and a cell converter for one Arrow field."""
    import pyarrow.types as pt

    kind = field.type.value_type if pt.is_dictionary(field.type) else field.type
    same: Callable[[Any], object] = lambda v: v  # noqa: E731
    iso: Callable[[Any], object] = lambda v: None if v is None else v.isoformat()  # noqa: E731
    if pt.is_boolean(kind):
        return "BOOLEAN", lambda v: None if v is None else int(v)
    if pt.is_integer(kind):
        return "INTEGER", same
    if pt.is_floating(kind):
        return "REAL", same
    if pt.is_decimal(kind):
        return "REAL", lambda v: None if v is None else float(v)
    if pt.is_string(kind) or pt.is_large_string(kind):
        return "TEXT", same
    if pt.is_binary(kind) or pt.is_large_binary(kind) or pt.is_fixed_size_binary(kind):
        return "BLOB", same
    if pt.is_timestamp(kind):
        return "TIMESTAMP", lambda v: None if v is None else v.isoformat(sep=" ")
    if pt.is_date(kind) or pt.is_time(kind):
        return ("DATE" if pt.is_date(kind) else "TIME"), iso
    if pt.is_null(kind):
        return "", same
    raise StoreError(
        f"column {field.name!r} has Arrow type {field.type}, which the sqlite backend cannot "
        "store; allowed: bool, integers, floats, decimals, strings, binary, dates, times, "
        "timestamps"
    )


def columns_read(path: Path, sql: str) -> dict[str, set[str]] | None:
    """Table -> columns SQLite's authorizer sees read while preparing `sql` on the file at
    `path` (read-only, never run); None when it is no file or SQLite cannot say."""
    if not path.is_file():
        return None
    read: dict[str, set[str]] = {}

    def record(action: int, table: str | None, column: str | None, *_: Any) -> int:
        if action == sqlite3.SQLITE_READ and table and not table.startswith("sqlite_"):
            read.setdefault(table, set()).add(column or "")
        return sqlite3.SQLITE_OK

    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        conn.set_authorizer(record)
        conn.execute(f"EXPLAIN {sql.strip().rstrip(';')}").close()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return read
