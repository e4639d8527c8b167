"""The embedded default backend: one read-only SQLite file copy per item.

`SQLiteStore.provision` copies the dataset's database (built once per process from Parquet when
the dataset has none) to `<workdir>/<opaque id>.sqlite` and makes it read-only. Analyst
connections are read-only four ways: `mode=ro`, `PRAGMA query_only`, no extension loading and an
authorizer that refuses every write, DDL, ATTACH, transaction and non-introspection PRAGMA; a
progress handler enforces the per-statement time limit.
"""

from __future__ import annotations

import difflib
import os
import re
import secrets
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

from stores.base import (
    MAX_ROWS,
    Column,
    DatasetFiles,
    Fingerprint,
    ProvisionedStore,
    QueryError,
    QueryRefused,
    QueryResult,
    QueryTimeout,
    Store,
    StoreError,
    StoreSession,
    TableInfo,
    new_store_id,
)
from stores.fingerprint import LogicalHasher, file_sha256

__all__ = ["SQLiteProvisionedStore", "SQLiteSession", "SQLiteStore", "sqlite_logical_fingerprint"]

READ_ONLY_NOTE = "(writes, DDL, ATTACH, extension loading and state-changing PRAGMAs are refused)"
QUERY_KEYWORDS = frozenset({"SELECT", "WITH", "VALUES", "EXPLAIN", "PRAGMA"})
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
"""Leading keywords run_sql executes; any other statement is refused without running."""
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
_PROGRESS_STEPS = 1000
_INTERNAL_PREFIX = re.compile(r"sqlite_", re.IGNORECASE)

_A = sqlite3
_CREATE = {
    getattr(_A, n): n[7:].replace("_", " ").replace("VTABLE", "VIRTUAL TABLE")
    for n in dir(_A)
    if n.startswith(("SQLITE_CREATE_", "SQLITE_DROP_"))
}
"""Authorizer codes of every CREATE/DROP (tables, temp ones, indexes, views, triggers, vtables)."""
_WRITES = {_A.SQLITE_INSERT: "INSERT", _A.SQLITE_UPDATE: "UPDATE", _A.SQLITE_DELETE: "DELETE"}


def _denial(action: int, arg1: str | None, arg2: str | None) -> str | None:
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


def _refusal(reason: str) -> QueryRefused:
    return QueryRefused(f"run_sql is read-only: {reason} {READ_ONLY_NOTE}")


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


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A `mode=ro`, `query_only` connection with extension loading off and no ATTACH slots."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the SQLite store {path}: {exc}") from exc
    if hasattr(conn, "enable_load_extension"):
        conn.enable_load_extension(False)
    conn.execute("PRAGMA query_only = ON")
    conn.execute("PRAGMA trusted_schema = OFF")
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    return conn


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _user_tables(conn: sqlite3.Connection, types: tuple[str, ...]) -> list[str]:
    marks = ", ".join("?" for _ in types)
    rows = conn.execute(f"SELECT name FROM sqlite_schema WHERE type IN ({marks})", types)
    return sorted(str(r[0]) for r in rows if not _INTERNAL_PREFIX.match(str(r[0])))


class SQLiteSession(StoreSession):
    """One analyst connection: read-only, one statement per call, time-limited."""

    def __init__(self, path: Path, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._lock = threading.RLock()  # _translate may list tables
        self._deadline = float("inf")
        self._timed_out = False
        self._denials: list[str] = []
        self._conn: sqlite3.Connection | None = _connect_read_only(path)
        self._conn.set_authorizer(self._authorize)
        self._conn.set_progress_handler(self._progress, _PROGRESS_STEPS)

    def _authorize(self, action: int, arg1: str | None, arg2: str | None, *_: Any) -> int:
        reason = _denial(action, arg1, arg2)
        if reason is None:
            return sqlite3.SQLITE_OK
        self._denials.append(reason)
        return sqlite3.SQLITE_DENY

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
            return _refusal(self._denials[0])
        if self._timed_out:
            return QueryTimeout(
                f"the statement ran longer than the {self._timeout_s:g} s limit and was stopped; "
                "make it cheaper (filter or aggregate earlier, bound any recursion)"
            )
        if "readonly database" in message or "may not be modified" in message:
            return _refusal(f"the statement tried to write ({message})")
        if message.startswith("no such table"):
            return QueryError(f"{message}; tables in this store: {', '.join(self.list_tables())}")
        return QueryError(f"SQLite error: {message}")

    def list_tables(self) -> list[str]:
        tables: list[str] = self._run(
            "SELECT name FROM sqlite_schema WHERE type IN ('table', 'view')",
            (),
            lambda c: sorted(str(r[0]) for r in c if not _INTERNAL_PREFIX.match(str(r[0]))),
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
        count: int = self._run(
            f"SELECT count(*) FROM {_quote_ident(found)}", (), lambda c: c.fetchone()[0]
        )
        return TableInfo(name=found, columns=columns, row_count=count)

    def run_sql(self, sql: str, max_rows: int = MAX_ROWS) -> QueryResult:
        if max_rows < 0:
            raise ValueError(f"max_rows must be 0 or more, got {max_rows}")
        statement = single_statement(sql)
        keyword = re.match(r"[A-Za-z]*", statement)
        first = keyword.group(0).upper() if keyword else ""
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
            raise _refusal(
                f"{first or statement[:20]!r} statements are not allowed; run_sql runs one query "
                "(SELECT, WITH ... SELECT, VALUES, EXPLAIN or an introspection PRAGMA)"
            )

        def fetch(cursor: sqlite3.Cursor) -> QueryResult:
            rows = cursor.fetchmany(max_rows + 1)
            names = [str(d[0]) for d in cursor.description or ()]
            return QueryResult(
                columns=names,
                rows=[tuple(r) for r in rows[:max_rows]],
                truncated=len(rows) > max_rows,
                max_rows=max_rows,
            )

        result: QueryResult = self._run(statement, (), fetch)
        return result

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _canonical_rows(conn: sqlite3.Connection, table: str, columns: list[str]) -> Iterator[Any]:
    """Rows ordered by every column (binary collation, then storage class to split 1 from 1.0)."""
    order = ", ".join(
        f"{_quote_ident(c)} COLLATE BINARY, typeof({_quote_ident(c)})" for c in columns
    )
    select = ", ".join(_quote_ident(c) for c in columns)
    cursor = conn.execute(f"SELECT {select} FROM {_quote_ident(table)} ORDER BY {order}")
    while batch := cursor.fetchmany(5000):
        yield from batch


def sqlite_logical_fingerprint(conn: sqlite3.Connection) -> str:
    """The logical fingerprint (see `stores.fingerprint`) of every user table on `conn`."""
    hasher = LogicalHasher()
    for table in _user_tables(conn, ("table",)):
        info = conn.execute("SELECT name, type FROM pragma_table_info(?) ORDER BY cid", (table,))
        columns = [(str(n), str(t)) for n, t in info]
        hasher.add_table(table, columns, _canonical_rows(conn, table, [c for c, _ in columns]))
    return hasher.hexdigest()


class SQLiteProvisionedStore(ProvisionedStore):
    """One item's read-only database file and the sessions opened on it."""

    backend = "sqlite"

    def __init__(
        self,
        path: Path,
        store_id: str,
        timeout_s: float,
        on_teardown: Callable[[str], object] | None = None,
        logical_cache: dict[str, str] | None = None,
    ) -> None:
        self.store_id = store_id
        self._path = path
        self._timeout_s = timeout_s
        self._on_teardown = on_teardown
        self._logical_cache = {} if logical_cache is None else logical_cache
        """Logical fingerprint by physical hash: the same bytes always hold the same content."""
        self._sessions: list[SQLiteSession] = []
        self._torn_down = False

    @property
    def mount_path(self) -> Path:
        return self._path

    def _check_live(self) -> None:
        if self._torn_down or not self._path.exists():
            raise StoreError(f"store {self.display_id} is torn down or its file is missing")

    def connect(self) -> SQLiteSession:
        self._check_live()
        session = SQLiteSession(self._path, self._timeout_s)
        self._sessions.append(session)
        return session

    def fingerprint(self) -> Fingerprint:
        """Logical and physical hashes; the logical one read through a private connection."""
        self._check_live()
        physical = file_sha256(self._path)
        logical = self._logical_cache.get(physical)
        if logical is None:
            conn = _connect_read_only(self._path)
            try:
                logical = sqlite_logical_fingerprint(conn)
            except sqlite3.Error as exc:
                raise StoreError(f"cannot fingerprint store {self.display_id}: {exc}") from exc
            finally:
                conn.close()
            if file_sha256(self._path) != physical:
                raise StoreError(f"store {self.display_id} changed while it was fingerprinted")
            self._logical_cache[physical] = logical
        return Fingerprint(logical=logical, physical=physical)

    def teardown(self) -> None:
        """Close every session, delete the file and its side files; idempotent."""
        self._torn_down = True
        if self._on_teardown is not None:
            self._on_teardown(self.store_id)
        for session in self._sessions:
            session.close()
        self._sessions.clear()
        for suffix in ("", "-journal", "-wal", "-shm"):
            side = self._path.with_name(self._path.name + suffix)
            try:
                side.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StoreError(f"cannot remove {side} of store {self.display_id}: {exc}") from exc


class SQLiteStore(Store):
    """The `sqlite` backend: a plain file copy per item, read-only at the OS and SQLite level."""

    name: ClassVar[str] = "sqlite"

    def __init__(self, workdir: Path, *, statement_timeout_s: float | None = None) -> None:
        super().__init__(workdir, statement_timeout_s=statement_timeout_s)
        self._templates: dict[tuple[object, ...], Path] = {}
        self._template_dir: Path | None = None
        self._live: dict[str, SQLiteProvisionedStore] = {}
        self._logical_cache: dict[str, str] = {}

    def provision(self, dataset: DatasetFiles) -> SQLiteProvisionedStore:
        source = self._template(dataset)
        self.workdir.mkdir(parents=True, exist_ok=True)
        while True:  # the id is random; O_EXCL makes a (vanishingly rare) clash retry
            store_id = new_store_id()
            dest = self.workdir / f"{store_id}.sqlite"
            try:
                os.close(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                break
            except FileExistsError:
                continue
        store = SQLiteProvisionedStore(
            dest,
            store_id,
            self.statement_timeout_s,
            on_teardown=lambda sid: self._live.pop(sid, None),
            logical_cache=self._logical_cache,
        )
        try:
            shutil.copyfile(source, dest)
            dest.chmod(0o444)
        except OSError as exc:
            store.teardown()
            raise StoreError(f"cannot copy dataset {dataset.name!r} to {dest}: {exc}") from exc
        self._live[store_id] = store
        return store

    def teardown_session(self) -> None:
        """Tear down stores still alive and delete this process's built templates."""
        for store in list(self._live.values()):
            store.teardown()
        self._live.clear()
        if self._template_dir is not None:
            shutil.rmtree(self._template_dir, ignore_errors=True)
            self._template_dir = None
        self._templates.clear()

    def _template(self, dataset: DatasetFiles) -> Path:
        """The file each copy is made from: the dataset's own database when usable as is."""
        if dataset.sqlite_path is not None:
            src = dataset.sqlite_path
            if not src.is_file():
                raise StoreError(f"dataset {dataset.name!r}: sqlite_path {src} does not exist")
            if not _is_wal(src):
                return src
            key: tuple[object, ...] = ("wal", str(src.resolve()), _stat_key(src))
        else:
            files = sorted(dataset.parquet_dir.glob("*.parquet"))
            if not files:
                raise StoreError(
                    f"dataset {dataset.name!r} has no sqlite_path and no *.parquet files in "
                    f"{dataset.parquet_dir}; give one of them"
                )
            key = ("parquet", *((str(f.resolve()), _stat_key(f)) for f in files))
        cached = self._templates.get(key)
        if cached is not None and cached.exists():
            return cached
        if self._template_dir is None:
            self._template_dir = self.workdir / f".templates-{os.getpid()}-{secrets.token_hex(4)}"
            self._template_dir.mkdir(parents=True)
        built = self._template_dir / f"{len(self._templates)}.sqlite"
        if dataset.sqlite_path is not None:
            _copy_out_of_wal(dataset.sqlite_path, built)
        else:
            _build_from_parquet(files, built)
        self._templates[key] = built
        return built


def _stat_key(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def _is_wal(path: Path) -> bool:
    """True when the database header says WAL mode (file format versions 2 at bytes 18-19)."""
    with path.open("rb") as f:
        header = f.read(20)
    return len(header) == 20 and header[18] == 2


def _copy_out_of_wal(src: Path, dest: Path) -> None:
    """Copy a WAL-mode database (its -wal included) into a rollback-journal file."""
    source = sqlite3.connect(f"file:{quote(str(src.resolve()))}?mode=ro", uri=True)
    target = sqlite3.connect(dest)
    try:
        source.backup(target)
        target.execute("PRAGMA journal_mode = DELETE")
    except sqlite3.Error as exc:
        raise StoreError(f"cannot copy WAL database {src}: {exc}") from exc
    finally:
        target.close()
        source.close()


def _parquet_column(field: Any) -> tuple[str, Callable[[Any], object]]:
    """SQLite declared type and a cell converter for one Arrow field."""
    import pyarrow.types as pt

    kind = field.type.value_type if pt.is_dictionary(field.type) else field.type
    same: Callable[[Any], object] = lambda v: v  # noqa: E731
    iso: Callable[[Any], object] = lambda v: None if v is None else v.isoformat()  # noqa: E731
    if pt.is_boolean(kind):
        return "BOOLEAN", lambda v: None if v is None else int(v)
    if pt.is_integer(kind):
        return "INTEGER", same
    if pt.is_floating(kind):
        return "REAL", same
    if pt.is_decimal(kind):
        return "REAL", lambda v: None if v is None else float(v)
    if pt.is_string(kind) or pt.is_large_string(kind):
        return "TEXT", same
    if pt.is_binary(kind) or pt.is_large_binary(kind) or pt.is_fixed_size_binary(kind):
        return "BLOB", same
    if pt.is_timestamp(kind):
        return "TIMESTAMP", lambda v: None if v is None else v.isoformat(sep=" ")
    if pt.is_date(kind) or pt.is_time(kind):
        return ("DATE" if pt.is_date(kind) else "TIME"), iso
    if pt.is_null(kind):
        return "", same
    raise StoreError(
        f"column {field.name!r} has Arrow type {field.type}, which the sqlite backend cannot "
        "store; allowed: bool, integers, floats, decimals, strings, binary, dates, times, "
        "timestamps"
    )


def _build_from_parquet(files: list[Path], dest: Path) -> None:
    """A database with one table per `<table>.parquet` file, written under a private temp name."""
    import pyarrow.parquet as pq

    tmp = dest.with_name(f"{dest.name}.{secrets.token_hex(4)}.tmp")
    conn = sqlite3.connect(tmp, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("BEGIN")
        for file in files:
            table = pq.read_table(file)
            specs = [_parquet_column(f) for f in table.schema]
            names = [_quote_ident(f.name) for f in table.schema]
            cols = ", ".join(f"{n} {t}".rstrip() for n, (t, _) in zip(names, specs, strict=True))
            conn.execute(f"CREATE TABLE {_quote_ident(file.stem)} ({cols})")
            insert = f"INSERT INTO {_quote_ident(file.stem)} VALUES ({', '.join('?' * len(names))})"
            for batch in table.to_batches(max_chunksize=20_000):
                columns = [
                    [conv(v) for v in col.to_pylist()]
                    for col, (_, conv) in zip(batch.columns, specs, strict=True)
                ]
                conn.executemany(insert, zip(*columns, strict=True))
        conn.execute("COMMIT")
    except (sqlite3.Error, OSError, StoreError) as exc:
        conn.close()
        tmp.unlink(missing_ok=True)
        if isinstance(exc, StoreError):
            raise
        raise StoreError(f"cannot build a SQLite database from {files[0].parent}: {exc}") from exc
    conn.close()
    tmp.replace(dest)
