"""The process's one embedded ClickHouse (chDB) and the conversions around it.

chDB allows one data folder per process: `Engine` holds it, an admin connection (writes
allowed) and a reference count, and opens the analyst's read-only connections. `cells` turns
Arrow results into normalised Python values; `clickhouse_type` maps Arrow column types.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa

from stores.base import StoreError
from stores.clickhouse.names import literal, quote
from stores.common.pyvalues import column_values

__all__ = ["MEMORY_LIMIT", "Engine", "arrow", "cells", "clickhouse_type", "literal", "quote"]

MEMORY_LIMIT = 256_000_000
_INSTALL = "the clickhouse store needs chDB: run `uv add chdb`"


def clickhouse_type(t: pa.DataType, nullable: bool = True) -> str:
    """The ClickHouse column type for an Arrow type; `StoreError` for one with no mapping."""
    simple = {
        pa.bool_(): "Bool", pa.int8(): "Int8", pa.int16(): "Int16", pa.int32(): "Int32",
        pa.int64(): "Int64", pa.uint8(): "UInt8", pa.uint16(): "UInt16", pa.uint32(): "UInt32",
        pa.uint64(): "UInt64", pa.float32(): "Float32", pa.float64(): "Float64",
        pa.string(): "String", pa.large_string(): "String", pa.binary(): "String",
        pa.large_binary(): "String", pa.date32(): "Date32",
    }  # fmt: skip
    if pa.types.is_dictionary(t):
        return clickhouse_type(t.value_type, nullable)
    if t in simple:
        name = simple[t]
    elif pa.types.is_decimal(t):
        name = f"Decimal({t.precision}, {t.scale})"
    elif pa.types.is_timestamp(t):
        digits = {"s": 0, "ms": 3, "us": 6, "ns": 9}[t.unit]
        name = f"DateTime64({digits}, {literal(t.tz)})" if t.tz else f"DateTime64({digits})"
    else:
        raise StoreError(
            f"clickhouse store: no column type for Arrow type {t}; allowed: bool, ints, floats, "
            "decimals, strings, binary, date32, timestamps"
        )
    return f"Nullable({name})" if nullable else name


def _chdb() -> Any:
    try:
        from chdb.state import sqlitelike
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise StoreError(_INSTALL) from exc
    return sqlitelike


def arrow(result: Any) -> pa.Table:
    data = result.bytes()
    if not data:
        return pa.table({})
    return pa.ipc.open_file(pa.BufferReader(data)).read_all()


class Engine:
    """The process's one chDB engine: its data folder, an admin connection, reference count."""

    _lock = threading.Lock()
    _current: Engine | None = None

    def __init__(self, path: Path) -> None:
        self.path = path
        self.users = 0
        self._admin_lock = threading.RLock()
        self._parser: Any = None
        path.mkdir(parents=True, exist_ok=True)
        try:
            self._admin = _chdb().Connection(f"{path}?session_timezone=UTC")
        except RuntimeError as exc:
            raise StoreError(f"clickhouse store: cannot start chDB under {path}: {exc}") from exc

    @classmethod
    def acquire(cls, workdir: Path) -> Engine:
        with cls._lock:
            if cls._current is None:
                cls._current = Engine(workdir / f"chdb-{os.getpid()}")
            cls._current.users += 1
            return cls._current

    def release(self) -> None:
        with Engine._lock:
            self.users -= 1
            if self.users > 0 or Engine._current is not self:
                return
            Engine._current = None
            with self._admin_lock, contextlib.suppress(Exception):
                if self._parser is not None:
                    self._parser.close()
                self._admin.close()
            shutil.rmtree(self.path, ignore_errors=True)

    def run(self, sql: str) -> pa.Table:
        """One statement on the admin connection (writes allowed), as Arrow."""
        with self._admin_lock:
            try:
                return arrow(self._admin.query(sql, "Arrow"))
            except Exception as exc:
                raise StoreError(f"clickhouse store: {sql[:80]!r} failed: {exc}") from exc

    def load(self, target: str, data: pa.Table) -> None:
        """Append `data` to table `target` through chDB's Python table function."""
        with self._admin_lock:
            try:
                self._admin.query(f"INSERT INTO {target} SELECT * FROM Python(data)")
            except Exception as exc:
                raise StoreError(f"clickhouse store: loading {target} failed: {exc}") from exc

    def analyst_parse(self, sql: str) -> pa.Table:
        """`sql` (a `formatQuerySingleLine` or `EXPLAIN AST`) on a read-only connection of its
        own: the parser of a server mode, which runs nothing here. Raises chDB's RuntimeError."""
        with self._admin_lock:
            if self._parser is None:
                self._parser = _chdb().Connection(f"{self.path}?readonly=1")
            return arrow(self._parser.query(sql, "Arrow"))

    def databases(self) -> list[str]:
        return [str(v) for v in self.run("SELECT name FROM system.databases")["name"].to_pylist()]

    def analyst(self, database: str, timeout_s: float, limit: int) -> Any:
        """A connection whose profile is read-only, bound to `database`."""
        settings = {
            "readonly": "1",
            "database": database,
            "session_timezone": "UTC",
            "max_execution_time": f"{timeout_s:g}",
            "max_memory_usage": str(MEMORY_LIMIT),
            "max_threads": "1",
            "limit": str(limit),
            "join_use_nulls": "1",
            "aggregate_functions_null_for_empty": "1",
            "allow_python_table_function": "0",
            "allow_introspection_functions": "0",
        }
        query = "&".join(f"{k}={v}" for k, v in settings.items())
        try:
            return _chdb().Connection(f"{self.path}?{query}")
        except RuntimeError as exc:
            raise StoreError(
                f"clickhouse store: cannot open a session on {database}: {exc}"
            ) from exc


def cells(table: pa.Table, declared: dict[str, str] | None = None) -> list[tuple[Any, ...]]:
    """Rows as normalised Python values (see the module docstring)."""
    columns: list[list[Any]] = []
    for name, field, column in zip(table.column_names, table.schema, table.columns, strict=True):
        values = column_values(column)
        if pa.types.is_timestamp(field.type):
            values = [v if not isinstance(v, datetime) else _naive(v) for v in values]
        elif declared and field.type == pa.uint32() and "DateTime" in declared.get(name, ""):
            values = [None if v is None else _naive(datetime.fromtimestamp(v, UTC)) for v in values]
        columns.append([_plain(v) for v in values])
    return list(zip(*columns, strict=True)) if columns else []


def _naive(value: datetime) -> datetime:
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, int | float | str | bytes | Decimal | date):
        return value
    return str(value)
