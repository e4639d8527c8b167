"""One analyst connection to a PostgreSQL database (`PostgresSession`), used by every
PostgreSQL-served store: through ADBC as a SELECT-only role, each statement in a transaction
that is rolled back, non-queries refused by their leading keyword, results capped inside the
server, NUMERIC (which ADBC returns as text) converted back to `Decimal` by the column's type.
"""

from __future__ import annotations

import contextlib
import re
from decimal import Decimal
from typing import Any

import pyarrow as pa

from stores.base import (
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
from stores.common.caps import ResultCollector, cell_cap, statement_body
from stores.common.pyvalues import column_values
from stores.postgres.caps import postgres_capped_select
from stores.postgres.conn import adbc_module, ident, query_error
from stores.postgres.plans import postgres_tables_read
from stores.postgres.policy import refuse_sql_text_functions

__all__ = ["PostgresSession", "arrow_rows"]


_QUERY_START = re.compile(r"^(?:\s+|--[^\n]*\n?|/\*.*?\*/|\()*([A-Za-z]+)", re.DOTALL)
_READ_KEYWORDS = {"select", "with", "values", "table"}


def arrow_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """Rows as Python values, NUMERIC (ADBC: text) converted to Decimal by column type, and a
    value Python cannot hold (an infinite or far-future timestamp) as text (`column_values`)."""
    columns: list[list[Any]] = []
    for field, col in zip(table.schema, table.columns, strict=True):
        meta = field.metadata or {}
        values = column_values(col)
        if meta.get(b"POSTGRESQL:type") == b"numeric":
            values = [None if v is None else Decimal(v) for v in values]
        columns.append(values)
    return list(zip(*columns, strict=True)) if columns else []


class PostgresSession(StoreSession):
    """An ADBC connection as the item's SELECT-only role; each statement rolled back."""

    def __init__(
        self, uri: str, where: str, timeout_s: float, row_counts: RowCounts | None = None
    ) -> None:
        adbc = adbc_module()
        self._row_counts = row_counts

        self._where = where
        self._timeout_s = timeout_s
        try:
            self._conn = adbc.connect(uri)
        except adbc.Error as exc:
            raise StoreError(f"cannot connect to {where}: {exc}") from exc

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> tuple[list[str], pa.Table]:
        adbc = adbc_module()

        try:
            with self._conn.cursor() as cur:
                cur.execute(sql, params or None)
                table = cur.fetch_arrow_table()
            return table.column_names, table
        except adbc.Error as exc:
            raise query_error(exc, self._where, self._timeout_s) from exc
        finally:
            with contextlib.suppress(adbc.Error):
                self._conn.rollback()

    def list_tables(self) -> list[str]:
        _, t = self._query(
            "SELECT table_name::text FROM information_schema.tables "
            "WHERE table_schema = 'public' ORDER BY 1"
        )
        return [str(v) for v in t.column(0).to_pylist()]

    def describe_table(self, name: str) -> TableInfo:
        known = self.list_tables()
        if name not in known:
            raise QueryError(
                f"unknown table {name!r} on {self._where}; tables are: {', '.join(known)}"
            )
        _, cols = self._query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull "
            "FROM pg_attribute a WHERE a.attrelid = $1::regclass AND a.attnum > 0 "
            "AND NOT a.attisdropped ORDER BY a.attnum",
            (ident(name),),
        )

        def count() -> int:
            _, counted = self._query(f"SELECT count(*) FROM {ident(name)}")
            return int(counted.column(0)[0].as_py())

        return TableInfo(
            name=name,
            columns=[Column(str(c), str(t), bool(n)) for c, t, n in arrow_rows(cols)],
            row_count=count() if self._row_counts is None else self._row_counts(name, count),
        )

    def run_sql(
        self, sql: str, max_rows: int = MAX_ROWS, max_bytes: int = MAX_RESULT_BYTES
    ) -> QueryResult:
        """One query, described first without running (a prepared statement, so a second
        command is refused), then wrapped (`stores.postgres.caps.postgres_capped_select`) so the
        server cuts every variable-length cell and stops at `max_rows + 1` rows; batches are
        read from the stream until the caps are reached."""
        match = _QUERY_START.match(sql)
        keyword = match.group(1).lower() if match else ""
        if keyword not in _READ_KEYWORDS:
            raise QueryRefused(
                f"{keyword.upper() or 'this'} statements are refused on {self._where}: the "
                "store is read-only; send one SELECT (or WITH, VALUES, TABLE). Writes, DDL, "
                "temporary tables, COPY, SET, EXPLAIN, SHOW and transaction control are refused"
            )
        refuse_sql_text_functions(sql, self._where)
        adbc = adbc_module()
        body = statement_body(sql)
        try:
            with self._conn.cursor() as cur:
                schema = cur.adbc_execute_schema(body)
                self._conn.rollback()
                self._check(cur, body)
                columns = list(schema.names)
                cap = cell_cap(len(columns), max_rows, max_bytes)
                types = [(f.metadata or {}).get(b"POSTGRESQL:type", b"").decode() for f in schema]
                try:
                    cur.execute(postgres_capped_select(body, types, cap, max_rows))
                except adbc.Error as exc:
                    if str(getattr(exc, "sqlstate", "")) != "42601":
                        raise
                    raise QueryRefused(
                        f"refused on {self._where}: the statement parses but is not a query "
                        "whose rows can be read (a data-modifying WITH, SELECT INTO, ...); "
                        "only a SELECT (or WITH ... SELECT, VALUES, TABLE) is allowed"
                    ) from exc
                out = ResultCollector(columns, max_rows, max_bytes, cap)
                for batch in cur.fetch_record_batch():
                    if not out.extend(arrow_rows(pa.Table.from_batches([batch]))):
                        break
        except adbc.Error as exc:
            raise query_error(exc, self._where, self._timeout_s) from exc
        except (OSError, pa.ArrowException) as exc:  # raised while the stream is read
            if "statement timeout" in str(exc):
                raise QueryTimeout(
                    f"statement ran past the {self._timeout_s:g}s limit on {self._where} and "
                    "was cancelled"
                ) from exc
            raise QueryError(f"{str(exc).strip()} (on {self._where})") from exc
        finally:
            with contextlib.suppress(adbc.Error):
                self._conn.rollback()
        return out.result()

    def _check(self, cur: Any, body: str) -> None:
        """Refuse (`QueryRefused`) what this session may not run of a statement known to be
        one query that parses; called before it runs. Here: nothing more."""

    def set_time_limit(self, seconds: float) -> float:
        """`statement_timeout` for this connection, committed so it outlives the rollbacks."""
        adbc = adbc_module()
        try:
            with self._conn.cursor() as cur:
                cur.execute(f"SET statement_timeout = {max(1, int(seconds * 1000))}")
            self._conn.commit()
        except adbc.Error as exc:
            raise StoreError(f"cannot set the statement limit on {self._where}: {exc}") from exc
        self._timeout_s = seconds
        return seconds

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._conn.close()

    def tables_read(self, sql: str) -> set[str]:
        """Relations in PostgreSQL's plan (`EXPLAIN (FORMAT JSON)`, planned, never run)."""
        return postgres_tables_read(self._conn, sql, self._where, self._timeout_s)
