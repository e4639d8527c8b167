"""DuckDB's capped read: the analyst's query wrapped so the engine cuts cells and rows itself
(see `stores.common.caps`)."""

from __future__ import annotations

from collections.abc import Sequence

from stores.common.caps import wrap

__all__ = ["duckdb_capped_select", "duckdb_infinite_columns"]


_INFINITE_KINDS = frozenset(
    {"date", "timestamp", "timestamp_s", "timestamp_ms", "timestamp_ns",
     "timestamp with time zone"}
)  # fmt: skip
"""DuckDB type ids with `infinity`/`-infinity`, which its Python client turns into
9999-12-31/0001-01-01 (indistinguishable from those real dates)."""


def duckdb_infinite_columns(type_ids: Sequence[str]) -> list[int]:
    """The columns of `type_ids` that may hold ±infinity: `duckdb_capped_select` adds, after
    the result's own columns, one per such column holding 'infinity'/'-infinity' or NULL."""
    return [i for i, kind in enumerate(type_ids) if kind in _INFINITE_KINDS]


def duckdb_capped_select(body: str, type_ids: Sequence[str], cap: int, max_rows: int) -> str:
    """`body` as a subquery with positional column names: text cut to `cap + 1` characters,
    blobs to `cap + 1` bytes, other variable-size values (lists, structs, maps, JSON, bit
    strings) rendered as text and cut, and at most `max_rows + 1` rows; then one column per
    `duckdb_infinite_columns` naming an infinite date or timestamp."""
    exprs = []
    for i, kind in enumerate(type_ids):
        c = f"c{i}"
        if kind in _FIXED:
            exprs.append(c)
        elif kind == "varchar":
            exprs.append(f"left({c}, {cap + 1})")
        elif kind == "blob":
            exprs.append(f"{c}[1:{cap + 1}]")
        else:
            exprs.append(f"left(CAST({c} AS VARCHAR), {cap + 1})")
    infinite = duckdb_infinite_columns(type_ids)
    if not infinite:
        return wrap(body, exprs, max_rows)
    names = ", ".join(f"c{i}" for i in range(len(exprs)))
    exprs += [f"CASE WHEN isinf(c{i}) THEN CAST(c{i} AS VARCHAR) END" for i in infinite]
    return f"SELECT {', '.join(exprs)} FROM (\n{body}\n) AS _bi_q({names}) LIMIT {max_rows + 1}"


_FIXED = frozenset(
    {"boolean", "tinyint", "smallint", "integer", "bigint", "hugeint", "utinyint", "usmallint",
     "uinteger", "ubigint", "uhugeint", "float", "double", "decimal", "date", "time",
     "time_ns", "timestamp", "timestamp_s", "timestamp_ms", "timestamp_ns",
     "timestamp with time zone", "time with time zone", "interval", "uuid", "enum", "null"}
)  # fmt: skip
"""DuckDB type ids of bounded size, passed through the wrapping query unchanged."""
