"""Byte caps on query results: per cell and per result, on top of the row cap.

Each backend wraps the analyst's query so the engine itself cuts long text and binary cells
to `cell_cap(...) + 1` bytes or characters (one more than is kept, so a cut is visible) and
stops after `max_rows + 1` rows, then fetches in small batches into a `ResultCollector`, which
cuts cells to the cap, stops adding rows once the result passes `max_bytes`, and builds the
`QueryResult` that states every cut. A new backend needs exactly this: a wrapping query with
`cell_cap` and a batched fetch feeding `ResultCollector.add`; the wrapping queries are each
backend's own (`stores/<backend>/caps.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from stores.base import MAX_CELL_BYTES, QueryResult

__all__ = [
    "BlobTooLong",
    "ResultCollector",
    "cell_cap",
    "cell_size",
    "statement_body",
    "wrap",
]

ROW_BYTES = 32_000
"""The most bytes one wrapped row may carry before cells are cut harder (wide results)."""
ENGINE_FACTOR = 16
"""The engine may hold this many times `max_bytes` of cut cells (DuckDB and ADBC collect the
whole wrapped result before the first row is handed over)."""
_MIN_CELL = 64


def cell_cap(columns: int, max_rows: int, max_bytes: int) -> int:
    """Bytes kept per cell for a result of `columns` columns: `MAX_CELL_BYTES`, less when the
    row would pass `ROW_BYTES` or `max_rows + 1` such rows `ENGINE_FACTOR * max_bytes`
    (never below 64)."""
    columns = max(columns, 1)
    engine = ENGINE_FACTOR * max_bytes // ((max_rows + 1) * columns)
    return max(_MIN_CELL, min(MAX_CELL_BYTES, ROW_BYTES // columns, engine))


@dataclass(frozen=True)
class BlobTooLong:
    """A binary cell the engine reported only by length, because reading it would cost
    `size` bytes (SQLite's `zeroblob`)."""

    size: int


def _trailing_comment(sql: str) -> int | None:
    """Where a `--` comment that runs to the end of `sql` starts (outside quotes and block
    comments), or None."""
    i, quote = 0, ""
    while i < len(sql):
        ch = sql[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            if end < 0:
                return i
            i = end
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            if end < 0:
                return None
            i = end + 1
        i += 1
    return None


def statement_body(sql: str) -> str:
    """One statement without trailing whitespace, semicolons and `--` comments, so it can
    stand inside a wrapping subquery."""
    body = sql.strip()
    while True:
        before = body
        body = body.rstrip().rstrip(";").rstrip()
        cut = _trailing_comment(body)
        if cut is not None:
            body = body[:cut]
        if body == before:
            return body


def wrap(body: str, exprs: list[str], max_rows: int) -> str:
    """`SELECT <exprs> FROM (<body>) AS _bi_q(c0, c1, ...) LIMIT max_rows + 1`."""
    if not exprs:
        return f"SELECT * FROM (\n{body}\n) AS _bi_q LIMIT {max_rows + 1}"
    names = ", ".join(f"c{i}" for i in range(len(exprs)))
    return f"SELECT {', '.join(exprs)} FROM (\n{body}\n) AS _bi_q({names}) LIMIT {max_rows + 1}"


def cell_size(value: Any) -> int:
    """Bytes a cell costs in the result: UTF-8 length of text, length of binary, else its text."""
    if value is None or isinstance(value, bool | int | float):
        return 8
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    return len(str(value))


def _cut(value: Any, cap: int) -> tuple[Any, bool]:
    if isinstance(value, BlobTooLong):
        return f"<binary value of {value.size} bytes, not shown: cells are cut at {cap}>", True
    if isinstance(value, str) and len(value) > cap // 4:
        raw = value.encode("utf-8", "surrogatepass")
        if len(raw) > cap:
            return raw[:cap].decode("utf-8", "ignore"), True
    if isinstance(value, bytes | bytearray | memoryview) and len(value) > cap:
        return bytes(value[:cap]), True
    return value, False


@dataclass
class ResultCollector:
    """Rows added one by one under the row, cell and result caps."""

    columns: list[str]
    max_rows: int
    max_bytes: int
    cell_bytes: int = MAX_CELL_BYTES
    """The cap `cell_cap` gave the wrapping query."""
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    size: int = 0
    cut_cells: int = 0
    truncated: bool = False
    cut_by_bytes: bool = False

    @property
    def full(self) -> bool:
        """True once no further row will be kept."""
        return self.truncated

    def add(self, row: Sequence[Any]) -> bool:
        """Keep `row` if the caps allow; False once the result is full (stop fetching)."""
        if self.truncated:
            return False
        if len(self.rows) >= self.max_rows:
            self.truncated = True
            return False
        cells, cut = [], 0
        for value in row:
            kept, was_cut = _cut(value, self.cell_bytes)
            cells.append(kept)
            cut += was_cut
        size = sum(cell_size(v) for v in cells) + len(cells)
        if self.rows and self.size + size > self.max_bytes:
            self.truncated = self.cut_by_bytes = True
            return False
        self.rows.append(tuple(cells))
        self.size += size
        self.cut_cells += cut
        return True

    def extend(self, rows: Iterable[Sequence[Any]]) -> bool:
        """`add` each row; False once full."""
        return all(self.add(row) for row in rows)

    def result(self) -> QueryResult:
        return QueryResult(
            columns=self.columns,
            rows=self.rows,
            truncated=self.truncated,
            max_rows=self.max_rows,
            cut_cells=self.cut_cells,
            max_cell_bytes=self.cell_bytes,
            cut_by_bytes=self.cut_by_bytes,
            max_bytes=self.max_bytes,
        )
