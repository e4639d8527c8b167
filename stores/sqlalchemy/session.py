"""The analyst's connection through SQLAlchemy: logged in as the item's SELECT-only user.

Privileges are the guard (a write, DDL or file access fails on the server); the statement check
before them only turns what is not one read-only statement into `QueryRefused` with a message
the analyst can act on, and refuses what privileges leave open (session settings).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
import sqlglot
from sqlglot import exp

from stores.base import (
    MAX_CELL_BYTES,
    MAX_RESULT_BYTES,
    MAX_ROWS,
    Column,
    QueryError,
    QueryRefused,
    QueryResult,
    QueryTimeout,
    StoreSession,
    TableInfo,
    normalise_cell,
)

__all__ = ["SQLAlchemySession", "check_statement"]

READS = ("SELECT", "WITH", "(", "VALUES", "TABLE")
TIMEOUT_CODES = {1969, 3024}
"""MariaDB's max_statement_time and MySQL's max_execution_time interruptions."""
REFUSED_CODES = {1044, 1045, 1142, 1143, 1227, 1370, 1410, 1631}
"""Access denied (database, command, column, routine, SUPER/FILE) on the MySQL family."""
_READ_NODES = (exp.Select, exp.Union, exp.Intersect, exp.Except, exp.Subquery, exp.Values)


def check_statement(sql: str, dialect: str) -> None:
    """`QueryRefused` unless `sql` is one read-only query; SQL that does not parse is left
    to the server (a syntax error is the analyst's `QueryError`, privileges still hold)."""
    body = sql.strip().rstrip(";").strip()
    head = body.lstrip("(").split(None, 1)[0].upper() if body else ""
    if not body.startswith(READS) and head not in READS:
        raise QueryRefused(
            f"only one read-only query (SELECT or WITH ... SELECT) may run here, not {head!r}"
        )
    try:
        parsed = sqlglot.parse(body, read=dialect)
    except sqlglot.errors.SqlglotError:
        return
    if len([p for p in parsed if p is not None]) > 1:
        raise QueryRefused("one statement at a time: the text holds several")
    tree = parsed[0]
    if tree is not None and not isinstance(tree, _READ_NODES):
        raise QueryRefused(f"only read-only queries may run here, not {tree.key.upper()}")
    if tree is not None and tree.find(exp.Into) is not None:
        raise QueryRefused("SELECT ... INTO writes: only read-only queries may run here")


class SQLAlchemySession(StoreSession):
    """One connection of the item's reader; `run_sql` streams and stops at the caps."""

    def __init__(self, engine: sa.Engine, timeout_s: float, sqlglot_dialect: str) -> None:
        self._engine = engine
        self._dialect = sqlglot_dialect
        self._conn: sa.Connection | None = engine.connect()
        seconds = max(timeout_s, 0.001)
        if engine.dialect.name == "mariadb" or getattr(engine.dialect, "is_mariadb", False):
            self._conn.exec_driver_sql(f"SET SESSION max_statement_time = {seconds:.3f}")
        else:
            self._conn.exec_driver_sql(f"SET SESSION max_execution_time = {int(seconds * 1000)}")
        self._conn.commit()

    @property
    def conn(self) -> sa.Connection:
        if self._conn is None:
            raise QueryError("this session is closed")
        return self._conn

    def _run(self, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
        try:
            rows = self.conn.execute(sa.text(sql), params or {}).all()
        except sa.exc.DBAPIError as exc:
            raise translate(exc) from None
        finally:
            self._end()
        return list(rows)

    def _end(self) -> None:
        if self._conn is not None and self._conn.in_transaction():
            self._conn.rollback()

    def list_tables(self) -> list[str]:
        rows = self._run(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() "
            "ORDER BY table_name"
        )
        return [str(r[0]) for r in rows]

    def describe_table(self, name: str) -> TableInfo:
        rows = self._run(
            "SELECT column_name, column_type, is_nullable FROM information_schema.columns "
            "WHERE table_schema = DATABASE() AND table_name = :t ORDER BY ordinal_position",
            {"t": name},
        )
        if not rows:
            known = ", ".join(self.list_tables()) or "none"
            raise QueryError(f"no table {name!r} here (tables: {known})")
        quoted = self._engine.dialect.identifier_preparer.quote(name)
        count = self._run(f"SELECT COUNT(*) FROM {quoted}")[0][0]
        columns = [Column(str(c), str(t).upper(), n == "YES") for c, t, n in rows]
        return TableInfo(name, columns, int(count))

    def run_sql(
        self, sql: str, max_rows: int = MAX_ROWS, max_bytes: int = MAX_RESULT_BYTES
    ) -> QueryResult:
        check_statement(sql, self._dialect)
        body = sql.strip().rstrip(";")
        try:
            result = self.conn.execution_options(stream_results=True).exec_driver_sql(
                body.replace("%", "%%")  # the driver formats even without parameters
            )
            try:
                return collect(list(result.keys()), result, max_rows, max_bytes)
            finally:
                result.close()
        except sa.exc.DBAPIError as exc:
            raise translate(exc) from None
        except (sa.exc.SQLAlchemyError, ValueError) as exc:
            raise QueryError(str(exc)) from None
        finally:
            self._end()

    def tables_read(self, sql: str) -> set[str] | None:
        """The tables the statement names (not CTEs), from its parse tree."""
        try:
            tree = sqlglot.parse_one(sql.strip().rstrip(";"), read=self._dialect)
        except sqlglot.errors.SqlglotError as exc:
            raise QueryError(f"could not read the statement: {exc}") from None
        ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
        return {t.name for t in tree.find_all(exp.Table) if t.name and t.name not in ctes}

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def collect(columns: list[str], rows: Any, max_rows: int, max_bytes: int) -> QueryResult:
    """Rows until `max_rows` or `max_bytes`, each text or binary cell cut to the cell cap."""
    kept: list[tuple[Any, ...]] = []
    cut = size = 0
    truncated = by_bytes = False
    while True:
        batch = rows.fetchmany(64)
        if not batch:
            break
        for row in batch:
            if len(kept) >= max_rows:
                truncated = True
                break
            cells = []
            for value in row:
                value = normalise_cell(value)
                if isinstance(value, str | bytes) and len(value) > MAX_CELL_BYTES:
                    value, cut = value[:MAX_CELL_BYTES], cut + 1
                size += len(value) if isinstance(value, str | bytes) else 8
                cells.append(value)
            if size > max_bytes:
                truncated = by_bytes = True
                break
            kept.append(tuple(cells))
        if truncated:
            break
    return QueryResult(columns, kept, truncated, max_rows, cut, MAX_CELL_BYTES, by_bytes, max_bytes)


def translate(exc: sa.exc.DBAPIError) -> QueryError:
    """A driver error as the analyst's error: refused, timed out, or a plain query error."""
    orig = exc.orig
    code = orig.args[0] if orig is not None and orig.args else None
    message = str(orig.args[1]) if orig is not None and len(orig.args) > 1 else str(orig)
    if code in TIMEOUT_CODES:
        return QueryTimeout(f"the statement ran past the time limit: {message}")
    if code in REFUSED_CODES:
        return QueryRefused(f"refused by the server's privileges: {message}")
    return QueryError(message)
