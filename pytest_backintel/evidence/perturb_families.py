"""Further perturbations of a moving probe (`probe_moves`) for answers that dropping rows and
growing numbers leave in place: a 0/1 flag past a threshold, a count that is zero.

A salt at or above `FAMILY_BASE` names one of two families, applied to each table of a world's
copy after the usual moving perturbation:

- `later`: the rows dated at or after a pivot (the value of the table's first date column at
  quantile 1/2, 3/4, 7/8 or 15/16, one per attempt) have every other date column moved `days`
  later (12 to 19) and their floating-point numbers grown by `days` sixteenths, so recent
  durations and prices grow against earlier ones and a comparison of two periods can cross
  its threshold;
- `reassign`: one row in two takes another value (never its own) of each text column that is
  no key (a status, a person's id) among the column's values in the source (one in eight of
  them when that leaves two), so rows change group: a pending count, a repeat share moves.

Keys and date columns stay, so joins still match; honest evidence re-run on the copy follows
its data like the check query does.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

__all__ = ["FAMILY_ATTEMPTS", "FAMILY_BASE", "apply_family", "family_salt"]

FAMILY_BASE = 200_000_000
FAMILIES = ("later", "reassign")
FAMILY_ATTEMPTS = 8
"""Salts tried with a family once the plain moving salts leave an answer in place."""

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}( \d{2}:\d{2}:\d{2})?$")


def family_salt(attempt: int, moving: tuple[str, ...]) -> int:
    """The salt of a family probe: its low six bits are the attempt (families alternate, the
    pivot's quantile sweeps), the rest differ by answer."""
    spread = zlib.crc32(repr((attempt, moving)).encode()) % 1_000_000
    return FAMILY_BASE + 64 * spread + attempt % 64


def _date_columns(df: pl.DataFrame) -> list[str]:
    """Date and datetime columns, and text columns whose values all read as ISO dates."""
    import polars as pl

    found = []
    for col, dtype in df.schema.items():
        if dtype in (pl.Date, pl.Datetime) or isinstance(dtype, pl.Datetime):
            found.append(col)
        elif dtype == pl.String:
            values = df[col].drop_nulls().head(1000)
            if len(values) and all(_DATE.match(v) for v in values):
                found.append(col)
    return found


def _later(df: pl.DataFrame, skip: set[str], salt: int, step: int) -> pl.DataFrame:
    import polars as pl

    dates = _date_columns(df)
    if not dates or df.height == 0:
        return df
    pivot_col = dates[0]
    distinct = df[pivot_col].drop_nulls().unique().sort()
    if not len(distinct):
        return df
    quantile = 1 - 2.0 ** -(1 + step % 4)
    pivot = distinct[int(quantile * (len(distinct) - 1))]
    days = 12 + (salt // 64) % 8
    after = pl.col(pivot_col) >= pl.lit(pivot, dtype=df.schema[pivot_col])
    moved = []
    for col in dates[1:]:
        if df.schema[col] == pl.String:
            fmt = "%Y-%m-%d %H:%M:%S" if " " in str(df[col].drop_nulls().head(1).item()) else ""
            as_time = pl.col(col).str.to_datetime(fmt or "%Y-%m-%d", strict=False)
            later = (as_time + pl.duration(days=days)).dt.strftime(fmt or "%Y-%m-%d")
        else:
            later = pl.col(col) + pl.duration(days=days)
        moved.append(pl.when(after).then(later).otherwise(pl.col(col)).alias(col))
    for col, dtype in df.schema.items():
        if col not in skip and dtype.is_float():
            grown = (pl.col(col) * (1 + days / 16)).cast(dtype)
            moved.append(pl.when(after).then(grown).otherwise(pl.col(col)).alias(col))
    return df.with_columns(moved) if moved else df


def _gather(pool: pl.Series) -> Callable[[pl.Series], pl.Series]:
    """The values of `pool` at the positions of a series."""
    return lambda positions: pool.gather(positions)


def _reassign(df: pl.DataFrame, skip: set[str], salt: int, source: pl.DataFrame) -> pl.DataFrame:
    import polars as pl

    dates = set(_date_columns(df))
    index = pl.int_range(pl.len(), dtype=pl.Int64)
    chosen = index.hash(seed=salt) % 2 == 0
    moved = []
    for n, (col, dtype) in enumerate(df.schema.items()):
        if dtype != pl.String or col in skip or col in dates:
            continue
        values = source[col].drop_nulls().unique().sort()  # the rows dropped have theirs too
        pool = values.filter(values.hash(seed=salt) % 8 == 0)
        pool = pool if len(pool) >= 2 else values
        if len(pool) < 2:
            continue
        pick = (index.hash(seed=salt + n) % len(pool)).cast(pl.Int64)
        other = pick.map_batches(_gather(pool), return_dtype=pl.String)
        after = ((pick + 1) % len(pool)).map_batches(_gather(pool), return_dtype=pl.String)
        other = pl.when(other == pl.col(col)).then(after).otherwise(other)  # always another
        moved.append(pl.when(chosen).then(other).otherwise(pl.col(col)).alias(col))
    return df.with_columns(moved) if moved else df


def apply_family(df: pl.DataFrame, skip: set[str], salt: int, source: pl.DataFrame) -> pl.DataFrame:
    """`df` under the family `salt` names (unchanged below `FAMILY_BASE`); `skip` are its key
    columns, `source` the table before rows were dropped (whose values a text may take)."""
    if salt < FAMILY_BASE:
        return df
    attempt = (salt - FAMILY_BASE) % 64
    if FAMILIES[attempt % len(FAMILIES)] == "later":
        return _later(df, skip, salt, attempt // len(FAMILIES))
    return _reassign(df, skip, salt, source)
