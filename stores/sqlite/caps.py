"""SQLite's capped read: the analyst's query wrapped so SQLite cuts long cells, and a batched
fetch into a `ResultCollector` (see `stores.common.caps`)."""

from __future__ import annotations

import sqlite3

from stores.base import QueryResult
from stores.common.caps import BlobTooLong, ResultCollector

__all__ = ["sqlite_capped_query", "sqlite_collect"]


_SQLITE_BATCH = 32


def sqlite_capped_query(body: str, columns: int, cap: int) -> str:
    """`body` as a CTE with positional column names, each text cell cut to `cap + 1`
    characters and each blob longer than `cap` replaced by NULL plus its length. No outer
    LIMIT: it would stop SQLite flattening the CTE, and a co-routine copies (so expands) a
    `zeroblob`; rows are pulled one batch at a time and the pull stops at the caps."""
    names = [f"c{i}" for i in range(columns)]
    exprs = []
    for c in names:
        big = f"typeof({c}) = 'blob' AND length({c}) > {cap}"
        exprs.append(
            f"CASE WHEN {big} THEN NULL WHEN typeof({c}) = 'text' THEN substr({c}, 1, {cap + 1}) "
            f"ELSE {c} END"
        )
        exprs.append(f"CASE WHEN {big} THEN length({c}) END")
    return f"WITH _bi_q({', '.join(names)}) AS (\n{body}\n) SELECT {', '.join(exprs)} FROM _bi_q"


def sqlite_collect(
    cursor: sqlite3.Cursor, max_rows: int, max_bytes: int, names: list[str] | None, cap: int
) -> QueryResult:
    """Rows in batches of `_SQLITE_BATCH` into a `ResultCollector`; with `names`, the cursor holds
    `sqlite_capped_query` pairs (value, length of an over-long blob)."""
    wrapped = names is not None
    columns = names if names is not None else [str(d[0]) for d in cursor.description or ()]
    out = ResultCollector(columns, max_rows, max_bytes, cap)
    while batch := cursor.fetchmany(_SQLITE_BATCH):
        if wrapped:
            batch = [
                tuple(
                    v if n is None else BlobTooLong(int(n))
                    for v, n in zip(r[::2], r[1::2], strict=True)
                )
                for r in batch
            ]
        if not out.extend(batch):
            break
    return out.result()
