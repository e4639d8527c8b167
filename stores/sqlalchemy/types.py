"""Arrow types as the column types of a MySQL-family table (the load of a dataset's Parquet)."""

from __future__ import annotations

import pyarrow as pa

from stores.base import StoreError

__all__ = ["sql_type"]


def sql_type(t: pa.DataType, where: str) -> str:
    """The column type that holds every value of `t` unchanged; `StoreError` naming `where`
    (`table.column`) and the type when none does."""
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_integer(t):
        width = {8: "TINYINT", 16: "SMALLINT", 32: "INT", 64: "BIGINT"}[t.bit_width]
        return f"{width} UNSIGNED" if pa.types.is_unsigned_integer(t) else width
    if pa.types.is_float32(t):
        return "FLOAT"
    if pa.types.is_floating(t):
        return "DOUBLE"
    if pa.types.is_decimal(t):
        if t.precision > 65 or t.scale > 30:
            raise StoreError(f"{where}: {t} is wider than DECIMAL(65, 30), the widest there is")
        return f"DECIMAL({t.precision}, {t.scale})"
    if pa.types.is_date(t):
        return "DATE"
    if pa.types.is_timestamp(t):
        if t.tz is not None:
            raise StoreError(f"{where}: {t} has a time zone, which DATETIME cannot keep")
        return "DATETIME(6)"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "LONGTEXT"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "LONGBLOB"
    raise StoreError(
        f"{where}: no column type keeps Arrow type {t} (ints, floats, decimals, "
        "dates, timestamps, text and binary are supported)"
    )
