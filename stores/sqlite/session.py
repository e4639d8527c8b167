"""One analyst connection to a SQLite file: read-only, one statement per call, time-limited
(`SQLiteSession`; the item that opens it is `stores.sqlite.store`)."""

from __future__ import annotations

import difflib
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stores.base import (
    MAX_CELL_BYTES,
    MAX_RESULT_BYTES,
    MAX_ROWS,
    Column,
    QueryError,
    QueryRefused,
    QueryResult,
    QueryTimeout,
    RowCounts,
    StoreError,
    StoreSession,
    TableInfo,
)
from stores.common.caps import cell_cap, statement_body
from stores.sqlite.build import quote_ident
from stores.sqlite.caps import sqlite_capped_query, sqlite_collect
from stores.sqlite.fingerprint import INTERNAL_PREFIX, sqlite_btrees_read, sqlite_tables_read
from stores.sqlite.policy import (
    FOREIGN_WRITES,
    QUERY_KEYWORDS,
    VALUE_BYTES,
    connect_read_only,
    denial,
    leading_keyword,
    not_a_query,
    refusal,
    single_statement,
)

__all__ = ["SQLiteSession"]

_PROGRESS_STEPS = 1000
_MAX_COLUMNS = 900
"""The wrapping query doubles the columns; SQLite allows 2000 in a result."""


class SQLiteSession(StoreSession):
    """One analyst connection: read-only, one statement per call, time-limited."""

    def __init__(
        self,
        path: Path,
        timeout_s: float,
        denied: tuple[str, ...] = (),
        row_counts: RowCounts | None = None,
    ) -> None:
        self._timeout_s = timeout_s
        self._row_counts = row_counts
        self._denied = {t.lower() for t in denied}
        self._lock = threading.RLock()  # _translate may list tables
        self._deadline = float("inf")
        self._timed_out = False
        self._denials: list[str] = []
        self._conn: sqlite3.Connection | None = connect_read_only(path)
        self._conn.set_authorizer(self._authorize)
        self._conn.set_progress_handler(self._progress, _PROGRESS_STEPS)

    def _authorize(self, action: int, arg1: str | None, arg2: str | None, *_: Any) -> int:
        if action == sqlite3.SQLITE_READ and arg1 and arg1.lower() in self._denied:
            self._denials.append(f"permission denied: this role has no read grant on table {arg1}")
            return sqlite3.SQLITE_DENY
        reason = denial(action, arg1, arg2)
        if reason is None:
            return sqlite3.SQLITE_OK
        self._denials.append(reason)
        return sqlite3.SQLITE_DENY

    def set_time_limit(self, seconds: float) -> float:
        self._timeout_s = seconds
        return seconds

    def _progress(self) -> int:
        if time.monotonic() > self._deadline:
            self._timed_out = True
            return 1
        return 0

    def _run(
        self, sql: str, params: tuple[object, ...], fetch: Callable[[sqlite3.Cursor], Any]
    ) -> Any:
        """Execute one statement under the time limit, translating sqlite errors for the analyst."""
        with self._lock:
            if self._conn is None:
                raise StoreError("this SQLite session is closed; open a new one with connect()")
            self._denials.clear()
            self._timed_out = False
            self._deadline = time.monotonic() + self._timeout_s
            cursor: sqlite3.Cursor | None = None
            try:
                cursor = self._conn.execute(sql, params)
                return fetch(cursor)
            except sqlite3.Error as exc:
                raise self._translate(exc) from exc
            finally:
                self._deadline = float("inf")
                if cursor is not None:
                    cursor.close()

    def _translate(self, exc: sqlite3.Error) -> QueryError:
        message = str(exc)
        if self._denials:
            return refusal(self._denials[0])
        if self._timed_out:
            return QueryTimeout(
                f"the statement ran longer than the {self._timeout_s:g} s limit and was stopped; "
                "make it cheaper (filter or aggregate earlier, bound any recursion)"
            )
        if "readonly database" in message or "may not be modified" in message:
            return refusal(f"the statement tried to write ({message})")
        if "string or blob too big" in message:
            return QueryError(
                f"SQLite error: {message}: a text or blob value would pass this session's "
                f"{VALUE_BYTES}-byte limit per value; cut or aggregate values in SQL"
            )
        if message.startswith("no such table"):
            return QueryError(f"{message}; tables in this store: {', '.join(self.list_tables())}")
        return QueryError(f"SQLite error: {message}")

    def list_tables(self) -> list[str]:
        tables: list[str] = self._run(
            "SELECT name FROM sqlite_schema WHERE type IN ('table', 'view')",
            (),
            lambda c: sorted(str(r[0]) for r in c if not INTERNAL_PREFIX.match(str(r[0]))),
        )
        return tables

    def describe_table(self, name: str) -> TableInfo:
        tables = self.list_tables()
        found = next((t for t in tables if t == name), None) or next(
            (t for t in tables if t.lower() == name.lower()), None
        )
        if found is None:
            close = difflib.get_close_matches(name, tables, n=3)
            hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise QueryError(
                f"unknown table {name!r}.{hint} Tables in this store: {', '.join(tables)}"
            )
        columns: list[Column] = self._run(
            'SELECT name, type, "notnull" FROM pragma_table_info(?) ORDER BY cid',
            (found,),
            lambda c: [Column(str(n), str(t), nullable=not nn) for n, t, nn in c],
        )

        def count() -> int:
            n: int = self._run(
                f"SELECT count(*) FROM {quote_ident(found)}", (), lambda c: c.fetchone()[0]
            )
            return n

        rows = count() if self._row_counts is None else self._row_counts(found, count)
        return TableInfo(name=found, columns=columns, row_count=rows)

    def run_sql(
        self, sql: str, max_rows: int = MAX_ROWS, max_bytes: int = MAX_RESULT_BYTES
    ) -> QueryResult:
        """One query under the row and byte caps: the statement is wrapped so SQLite itself cuts
        text to the cell cap and reports an over-long blob by its length (which, for
        `zeroblob`, never materialises it), and rows are fetched in small batches."""
        if max_rows < 0:
            raise ValueError(f"max_rows must be 0 or more, got {max_rows}")
        statement = single_statement(sql)
        first = leading_keyword(statement)
        if first not in QUERY_KEYWORDS:
            # Prepare (never run) it under the authorizer to name exactly what is refused; a
            # statement SQLite cannot even parse (COPY, SET, INSTALL) is refused all the same.
            try:
                self._run(f"EXPLAIN {statement}", (), lambda c: None)
            except QueryRefused:
                raise
            except QueryError:
                if first not in FOREIGN_WRITES:
                    raise  # a misspelt query is a syntax error for the analyst to fix
            raise not_a_query(first, statement)

        body = statement_body(statement)
        if first in ("PRAGMA", "EXPLAIN"):  # small outputs, cannot be a subquery
            small: QueryResult = self._run(
                body, (), lambda c: sqlite_collect(c, max_rows, max_bytes, None, MAX_CELL_BYTES)
            )
            return small
        self._run(f"EXPLAIN {body}", (), lambda c: None)  # prepared only: the authorizer decides
        self._check_grants(body)
        try:
            names: list[str] = self._run(
                f"SELECT * FROM (\n{body}\n) LIMIT 0",
                (),
                lambda c: _undo_renames([str(d[0]) for d in c.description or ()]),
            )
        except QueryRefused:
            raise
        except QueryError as exc:
            raise refusal(
                "the statement prepares but is not a query whose rows can be read (a WITH "
                "... DELETE, for instance)"
            ) from exc
        if len(names) > _MAX_COLUMNS:
            raise QueryError(
                f"the result has {len(names)} columns; run_sql returns at most {_MAX_COLUMNS}"
            )
        cap = cell_cap(len(names), max_rows, max_bytes)
        result: QueryResult = self._run(
            sqlite_capped_query(body, len(names), cap),
            (),
            lambda c: sqlite_collect(c, max_rows, max_bytes, names, cap),
        )
        return result

    def _check_grants(self, body: str) -> None:
        """Refuse a statement whose program opens a denied table's b-tree (a `JOIN ... USING`
        reads one without naming a column the authorizer would see)."""
        if not self._denied:
            return
        with self._lock:
            if self._conn is None:
                raise StoreError("this SQLite session is closed; open a new one with connect()")
            opened = sqlite_btrees_read(self._conn, body)
        if denied := sorted(t for t in opened if t.lower() in self._denied):
            raise refusal(f"permission denied: this role has no read grant on table {denied[0]}")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def tables_read(self, sql: str) -> set[str]:
        """Tables SQLite's authorizer sees read (SQLITE_READ) while preparing `sql`."""
        with self._lock:
            if self._conn is None:
                raise StoreError("this SQLite session is closed; open a new one with connect()")
            return sqlite_tables_read(self._conn, single_statement(sql), self._authorize)


def _undo_renames(names: list[str]) -> list[str]:
    """Column names as the statement gave them: a subquery renames a repeated `a` to `a:1`."""
    out: list[str] = []
    for name in names:
        base, sep, n = name.rpartition(":")
        out.append(base if sep and n.isdigit() and base in out else name)
    return out
