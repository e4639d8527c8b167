"""ClickHouse's capped read: the analyst's query wrapped so the server cuts cells and rows
itself (see `stores.common.caps`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["clickhouse_capped_select"]


_CH_FIXED = re.compile(
    r"^(Nullable\()?(U?Int\d+|Float\d+|Bool|Decimal.*|Date.*|UUID|Enum.*|IPv[46])\)?$"
)
"""ClickHouse types of bounded size, passed through the wrapping query unchanged."""


def clickhouse_capped_select(
    body: str, names: Sequence[str], types: Sequence[str], cap: int, max_rows: int
) -> str:
    """`body` as a subquery: strings cut to `cap + 1` bytes, other variable-size values
    (arrays, maps, tuples, JSON) rendered as text and cut, at most `max_rows + 1` rows."""
    exprs = []
    for name, kind in zip(names, types, strict=True):
        column = "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"
        if _CH_FIXED.match(kind):
            exprs.append(f"{column} AS {column}")
        elif re.match(r"^(Nullable\()?(String|FixedString)", kind):
            exprs.append(f"substring({column}, 1, {cap + 1}) AS {column}")
        else:
            exprs.append(f"substring(toString({column}), 1, {cap + 1}) AS {column}")
    select = ", ".join(exprs) or "*"
    return f"SELECT {select} FROM (\n{body}\n) AS _bi_q LIMIT {max_rows + 1}"
