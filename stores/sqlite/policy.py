"""The sqlite backend's read-only policy: the guarded connection, what run_sql may execute and
why not."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from urllib.parse import quote

from stores.base import QueryError, QueryRefused, StoreError

__all__ = [
    "FOREIGN_WRITES",
    "PRAGMAS_WITHOUT_VALUE",
    "PRAGMAS_WITH_ARGUMENT",
    "QUERY_KEYWORDS",
    "READ_ONLY_NOTE",
    "VALUE_BYTES",
    "connect_read_only",
    "denial",
    "leading_keyword",
    "not_a_query",
    "refusal",
    "single_statement",
]

READ_ONLY_NOTE = "(writes, DDL, ATTACH, extension loading and state-changing PRAGMAs are refused)"
QUERY_KEYWORDS = frozenset({"SELECT", "WITH", "VALUES", "EXPLAIN", "PRAGMA"})
"""Leading keywords run_sql executes; any other statement is refused without running."""
FOREIGN_WRITES = frozenset(
    {
        "COPY",
        "SET",
        "RESET",
        "INSTALL",
        "LOAD",
        "EXPORT",
        "IMPORT",
        "CALL",
        "GRANT",
        "REVOKE",
        "TRUNCATE",
        "MERGE",
        "UPSERT",
        "USE",
        "PUT",
        "CHECKPOINT",
        "FORCE",
        "DETACH",
        "ATTACH",
    }
)
"""Other engines' statements that change state or reach files: refused, even though SQLite
cannot parse them, so every backend answers them alike."""
PRAGMAS_WITH_ARGUMENT = frozenset(
    {"table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
     "foreign_key_list"}
)  # fmt: skip
"""Introspection pragmas whose argument names a table or index (it sets nothing)."""
PRAGMAS_WITHOUT_VALUE = frozenset(
    {"collation_list", "function_list", "pragma_list", "encoding", "user_version",
     "application_id", "page_count", "page_size", "freelist_count"}
)  # fmt: skip
"""Pragmas that may only be read (`PRAGMA x`), never set. `database_list` is refused: it shows
host paths and the analyst has `list_tables` for what it needs."""
_SCHEMA_TABLES = frozenset(
    {"sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema"}
)
_DENIED_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit"})

_A = sqlite3
_CREATE = {
    getattr(_A, n): n[7:].replace("_", " ").replace("VTABLE", "VIRTUAL TABLE")
    for n in dir(_A)
    if n.startswith(("SQLITE_CREATE_", "SQLITE_DROP_"))
}
"""Authorizer codes of every CREATE/DROP (tables, temp ones, indexes, views, triggers, vtables)."""
_WRITES = {_A.SQLITE_INSERT: "INSERT", _A.SQLITE_UPDATE: "UPDATE", _A.SQLITE_DELETE: "DELETE"}


def denial(action: int, arg1: str | None, arg2: str | None) -> str | None:
    """Why the authorizer refuses an action, or None when the action is allowed."""
    if action in (_A.SQLITE_SELECT, _A.SQLITE_READ, _A.SQLITE_RECURSIVE):
        return None
    if action == _A.SQLITE_FUNCTION:
        return f"the function {arg2}() is not allowed" if arg2 in _DENIED_FUNCTIONS else None
    if action in _WRITES:
        if arg1 in _SCHEMA_TABLES:
            return None  # sqlite's own bookkeeping; the DDL action itself is checked and refused
        return f"{_WRITES[action]} on table {arg1!r} is not allowed"
    if action in _CREATE:
        target = f" on table {arg2!r}" if action in (1, 3, 5, 7) and arg2 else ""
        return f"{_CREATE[action]} {arg1!r}{target} is not allowed"
    if action == _A.SQLITE_PRAGMA:
        name = (arg1 or "").lower()
        if name in PRAGMAS_WITH_ARGUMENT or (name in PRAGMAS_WITHOUT_VALUE and arg2 is None):
            return None
        shown = f"PRAGMA {arg1}" + ("" if arg2 is None else f" = {arg2}")
        return (
            f"{shown} is not allowed; allowed are {', '.join(sorted(PRAGMAS_WITH_ARGUMENT))} "
            f"(with a table or index name) and {', '.join(sorted(PRAGMAS_WITHOUT_VALUE))} "
            "(read only, without a value)"
        )
    messages = {
        _A.SQLITE_ATTACH: f"ATTACH {arg1!r} is not allowed",
        _A.SQLITE_DETACH: f"DETACH {arg1!r} is not allowed",
        _A.SQLITE_ALTER_TABLE: f"ALTER TABLE {arg2!r} is not allowed",
        _A.SQLITE_REINDEX: "REINDEX is not allowed",
        _A.SQLITE_ANALYZE: f"ANALYZE {arg1!r} is not allowed",
        _A.SQLITE_TRANSACTION: f"{arg1} (transaction control) is not allowed; every run_sql "
        "statement runs on its own",
        _A.SQLITE_SAVEPOINT: f"SAVEPOINT/RELEASE {arg2!r} is not allowed; every run_sql "
        "statement runs on its own",
    }
    return messages.get(action, f"operation code {action} is not allowed")


def refusal(reason: str) -> QueryRefused:
    """The error run_sql raises for a refused statement, naming `reason`."""
    return QueryRefused(f"run_sql is read-only: {reason} {READ_ONLY_NOTE}")


def not_a_query(first: str, statement: str) -> QueryRefused:
    """The refusal of a statement whose leading keyword `first` is not in `QUERY_KEYWORDS`."""
    return refusal(
        f"{first or statement[:20]!r} statements are not allowed; run_sql runs one query "
        "(SELECT, WITH ... SELECT, VALUES, EXPLAIN or an introspection PRAGMA)"
    )


def leading_keyword(statement: str) -> str:
    """The statement's first word, upper-cased; empty when it does not start with a letter."""
    keyword = re.match(r"[A-Za-z]*", statement)
    return keyword.group(0).upper() if keyword else ""


def _skip_filler(sql: str, pos: int) -> int:
    """The index of the first character at/after `pos` that is not whitespace, a comment or `;`."""
    while pos < len(sql):
        if sql[pos].isspace() or sql[pos] == ";":
            pos += 1
        elif sql.startswith("--", pos):
            end = sql.find("\n", pos)
            pos = len(sql) if end < 0 else end + 1
        elif sql.startswith("/*", pos):
            end = sql.find("*/", pos + 2)
            pos = len(sql) if end < 0 else end + 2
        else:
            break
    return pos


def single_statement(sql: str) -> str:
    """The one statement in `sql`; `QueryRefused` if there are more, `QueryError` if none."""
    start = _skip_filler(sql, 0)
    end = len(sql)
    for i in range(start, len(sql)):
        if sql[i] == ";" and sqlite3.complete_statement(sql[start : i + 1]):
            end = i + 1
            break
    if start >= end:
        raise QueryError("run_sql needs one SQL statement; it got only whitespace or comments")
    rest = _skip_filler(sql, end)
    if rest < len(sql):
        extra = " ".join(sql[rest:].split())[:60]
        raise QueryRefused(
            f"run_sql accepts exactly one statement, but more follows the first: {extra!r}; "
            "send each query in its own run_sql call"
        )
    return sql[start:end]


VALUE_BYTES = 10_000_000
"""`SQLITE_LIMIT_LENGTH` of the analyst's connection: no text or blob value, stored or computed
(`zeroblob`, `randomblob`, `printf('%.600000000c', ...)`), may pass it, so SQLite refuses to
build a huge value in the harness process instead of allocating it."""


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A `mode=ro`, `query_only` connection with extension loading off, no ATTACH slots and
    no value longer than `VALUE_BYTES`."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the SQLite store {path}: {exc}") from exc
    if hasattr(conn, "enable_load_extension"):
        conn.enable_load_extension(False)
    conn.text_factory = _text
    conn.execute("PRAGMA query_only = ON")
    conn.execute("PRAGMA trusted_schema = OFF")
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, VALUE_BYTES)
    return conn


def _text(raw: bytes) -> str | bytes:
    """TEXT as str; bytes that are not UTF-8 (a damaged file) stay bytes instead of crashing
    the reader, so a fingerprint of such a file differs rather than fails."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw
