"""Arrow columns as Python values, with the values Python cannot hold named as text.

`datetime` stops at year 9999 while PostgreSQL's timestamps reach 294276 and its dates 5874897,
and both have `infinity`. Such a cell becomes readable text instead of an exception out of the
store: `'infinity'`/`'-infinity'` for PostgreSQL's infinities (the ADBC driver hands them over
as its epoch shift of the int64/int32 extremes), an ISO text for a date or time past year 9999,
and `<TYPE value Python cannot hold>` for anything else.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

__all__ = ["column_values", "iso_from_days"]

_PG_EPOCH_US = 946_684_800_000_000
_PG_EPOCH_DAYS = 10_957


def _wrap(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


_INFINITY = {
    (64, _wrap((1 << 63) - 1 + _PG_EPOCH_US, 64)): "infinity",
    (64, _wrap(-(1 << 63) + _PG_EPOCH_US, 64)): "-infinity",
    (32, _wrap((1 << 31) - 1 + _PG_EPOCH_DAYS, 32)): "infinity",
    (32, _wrap(-(1 << 31) + _PG_EPOCH_DAYS, 32)): "-infinity",
}
_PER_DAY = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400_000_000_000}


def iso_from_days(days: int) -> str:
    """The proleptic Gregorian date `days` after 1970-01-01, any year (H. Hinnant's algorithm)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    return f"{year:04d}-{month:02d}-{day:02d}" if year >= 0 else f"{year:05d}-{month:02d}-{day:02d}"


def _text(scalar: pa.Scalar) -> str:
    """A cell Python cannot hold, as text."""
    kind = scalar.type
    raw = getattr(scalar, "value", None)
    if isinstance(raw, int) and (pa.types.is_timestamp(kind) or pa.types.is_date32(kind)):
        bits = 64 if pa.types.is_timestamp(kind) else 32
        if (named := _INFINITY.get((bits, raw))) is not None:
            return named
        if pa.types.is_date32(kind):
            return iso_from_days(raw)
        days, rest = divmod(raw, _PER_DAY[kind.unit])
        seconds = rest // (_PER_DAY[kind.unit] // 86_400)
        clock = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        return f"{iso_from_days(days)} {clock}"
    return f"<{kind} value Python cannot hold>"


def _one(scalar: pa.Scalar) -> Any:
    try:
        return scalar.as_py()
    except (OverflowError, ValueError, pa.ArrowException):
        return _text(scalar)


def column_values(column: pa.ChunkedArray | pa.Array) -> list[Any]:
    """`column.to_pylist()`, except that a cell Python cannot hold becomes text (see above)."""
    try:
        values: list[Any] = column.to_pylist()
        return values
    except (OverflowError, ValueError, pa.ArrowException):
        return [_one(scalar) for scalar in column]
