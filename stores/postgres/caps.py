"""PostgreSQL's capped read: the analyst's query wrapped so the server cuts cells and rows
itself (see `stores.common.caps`)."""

from __future__ import annotations

from collections.abc import Sequence

from stores.common.caps import wrap

__all__ = ["postgres_capped_select"]


_PG_FIXED = frozenset(
    {"int2", "int4", "int8", "float4", "float8", "bool", "date", "time", "timetz", "timestamp",
     "timestamptz", "interval", "uuid", "oid", "numeric", "money"}
)  # fmt: skip
"""PostgreSQL types of bounded size (numeric: at most 131072 digits), passed unchanged."""


def postgres_capped_select(body: str, type_names: Sequence[str], cap: int, max_rows: int) -> str:
    """`body` as a subquery with positional column names: bytea cut to `cap + 1` bytes, any
    other variable-size value (text, json, arrays, records) as text cut to `cap + 1`
    characters, and at most `max_rows + 1` rows."""
    exprs = []
    for i, kind in enumerate(type_names):
        c = f"_bi_q.c{i}"
        if kind in _PG_FIXED:
            exprs.append(c)
        elif kind == "bytea":
            exprs.append(f"substring({c} from 1 for {cap + 1})")
        else:
            exprs.append(f"left({c}::text, {cap + 1})")
    return wrap(body, exprs, max_rows)
