"""Arrow column types as PostgreSQL column types, for loading a dataset into a database."""

from __future__ import annotations

import pyarrow as pa

from stores.base import StoreError

__all__ = ["pg_type"]


def pg_type(t: pa.DataType) -> str:
    """The PostgreSQL column type for an Arrow type; `StoreError` for one with no mapping."""
    simple = {
        pa.bool_(): "boolean", pa.int8(): "smallint", pa.int16(): "smallint",
        pa.int32(): "integer", pa.int64(): "bigint", pa.float32(): "real",
        pa.float64(): "double precision", pa.string(): "text", pa.large_string(): "text",
        pa.date32(): "date", pa.binary(): "bytea", pa.large_binary(): "bytea",
    }  # fmt: skip
    if t in simple:
        return simple[t]
    if pa.types.is_decimal(t):
        return f"numeric({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "timestamptz" if t.tz else "timestamp"
    if pa.types.is_dictionary(t):
        return pg_type(t.value_type)
    raise StoreError(
        f"postgres store: no column type for Arrow type {t}; allowed: bool, ints, floats, "
        "decimals, strings, binary, date32, timestamps"
    )
