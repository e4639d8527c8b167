"""Reading a SQLite database without running the analyst's query: which tables a statement
reads (SQLite's authorizer while it is prepared) and the logical fingerprint of every table."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from stores.base import QueryError
from stores.fingerprint import LogicalHasher, summary_digest
from stores.sqlite.build import quote_ident
from stores.sqlite.summary import duckdb_row_summaries

__all__ = [
    "INTERNAL_PREFIX",
    "sqlite_btrees_read",
    "sqlite_logical_fingerprint",
    "sqlite_source_fingerprint",
    "sqlite_tables_read",
]


def sqlite_tables_read(
    conn: sqlite3.Connection, statement: str, policy: Callable[..., int]
) -> set[str]:
    """Prepare (never run) `statement` under an authorizer that records every table read."""
    read: set[str] = set()

    def record(action: int, arg1: str | None, arg2: str | None, *rest: Any) -> int:
        if action == sqlite3.SQLITE_READ and arg1 and not arg1.startswith("sqlite_"):
            read.add(arg1)
        return policy(action, arg1, arg2, *rest)

    conn.set_authorizer(record)
    try:
        conn.execute(f"EXPLAIN {statement}").close()
    except sqlite3.Error as exc:
        raise QueryError(f"SQLite error: {exc}") from exc
    finally:
        conn.set_authorizer(policy)
    return read | sqlite_btrees_read(conn, statement)


def sqlite_btrees_read(conn: sqlite3.Connection, statement: str) -> set[str]:
    """Tables whose b-tree (or one of their indexes) the compiled program opens for reading:
    the `OpenRead` instructions of `EXPLAIN`, by root page. The authorizer alone misses the
    right-hand table of a `JOIN ... USING` whose columns are never named."""
    roots = {
        int(page): str(table)
        for page, table in conn.execute(
            "SELECT rootpage, tbl_name FROM main.sqlite_schema WHERE rootpage > 0"
        )
    }
    try:
        program = conn.execute(f"EXPLAIN {statement}").fetchall()
    except sqlite3.Error as exc:
        raise QueryError(f"SQLite error: {exc}") from exc
    opened = {int(p2) for _, op, _p1, p2, p3, *_ in program if op == "OpenRead" and p3 == 0}
    return {roots[p] for p in opened if p in roots and not INTERNAL_PREFIX.match(roots[p])}


INTERNAL_PREFIX = re.compile(r"sqlite_", re.IGNORECASE)


def user_tables(conn: sqlite3.Connection, types: tuple[str, ...]) -> list[str]:
    """The user's tables (or views) of the given types, by name, without SQLite's own."""
    marks = ", ".join("?" for _ in types)
    rows = conn.execute(f"SELECT name FROM sqlite_schema WHERE type IN ({marks})", types)
    return sorted(str(r[0]) for r in rows if not INTERNAL_PREFIX.match(str(r[0])))


def _canonical_rows(conn: sqlite3.Connection, table: str, columns: list[str]) -> Iterator[Any]:
    """Rows ordered by every column (binary collation, then storage class to split 1 from 1.0)."""
    order = ", ".join(f"{quote_ident(c)} COLLATE BINARY, typeof({quote_ident(c)})" for c in columns)
    select = ", ".join(quote_ident(c) for c in columns)
    cursor = conn.execute(f"SELECT {select} FROM {quote_ident(table)} ORDER BY {order}")
    while batch := cursor.fetchmany(5000):
        yield from batch


def _declared_columns(conn: sqlite3.Connection) -> dict[str, list[tuple[str, str]]]:
    """Every user table's (column, declared type) pairs, by table name."""
    tables = {}
    for table in user_tables(conn, ("table",)):
        info = conn.execute("SELECT name, type FROM pragma_table_info(?) ORDER BY cid", (table,))
        tables[table] = [(str(n), str(t)) for n, t in info]
    return tables


def sqlite_logical_fingerprint(conn: sqlite3.Connection) -> str:
    """The logical fingerprint (see `stores.fingerprint`) of every user table on `conn`."""
    hasher = LogicalHasher()
    for table, columns in _declared_columns(conn).items():
        hasher.add_table(table, columns, _canonical_rows(conn, table, [c for c, _ in columns]))
    return hasher.hexdigest()


def sqlite_source_fingerprint(conn: sqlite3.Connection, path: Path) -> str:
    """The fingerprint of a user's file used in place, in the summary family: per table,
    DuckDB's one-pass summary where it reads the table exactly (`stores.sqlite.summary`),
    else the table's sorted rows as `sqlite_logical_fingerprint` hashes them; the digest
    names which way each table was read."""
    tables = _declared_columns(conn)
    summaries = duckdb_row_summaries(path, list(tables))
    entries: list[tuple[str, list[tuple[str, str]], tuple[object, ...]]] = []
    for table, columns in tables.items():
        summary = summaries.get(table)
        if summary is None:
            hasher = LogicalHasher()
            names = [c for c, _ in columns]
            hasher.add_table(table, columns, _canonical_rows(conn, table, names))
            entries.append((table, columns, ("sorted-rows", hasher.hexdigest())))
        else:
            entries.append((table, columns, ("duckdb-row-hash", *summary)))
    return summary_digest(entries)
