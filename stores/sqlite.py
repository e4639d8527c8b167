"""The embedded default backend: one read-only SQLite file copy per item.

`SQLiteStore.provision` copies the dataset's database (built once per process from Parquet when
the dataset has none, see `stores.sqlite_build`) to `<workdir>/<opaque id>.sqlite` and makes it
read-only. Analyst connections are read-only four ways: `mode=ro`, `PRAGMA query_only`, no
extension loading and an authorizer that refuses every write, DDL, ATTACH, transaction and
non-introspection PRAGMA (`stores.sqlite_policy`); a progress handler enforces the per-statement
time limit.
"""

from __future__ import annotations

import difflib
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from stores.base import (
    MAX_CELL_BYTES,
    MAX_RESULT_BYTES,
    MAX_ROWS,
    Column,
    DatasetFiles,
    Fingerprint,
    ProvisionedStore,
    QueryError,
    QueryRefused,
    QueryResult,
    QueryTimeout,
    RowCounts,
    Store,
    StoreError,
    StoreSession,
    TableInfo,
    new_store_id,
)
from stores.caps import cell_cap, sqlite_capped_query, sqlite_collect, statement_body
from stores.fingerprint import file_sha256
from stores.logical_cache import LogicalCache
from stores.once import OnceMap
from stores.sqlite_build import TemplateCache, quote_ident
from stores.sqlite_fingerprint import (
    INTERNAL_PREFIX,
    sqlite_btrees_read,
    sqlite_logical_fingerprint,
    sqlite_tables_read,
)
from stores.sqlite_policy import (
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

__all__ = ["SQLiteProvisionedStore", "SQLiteSession", "SQLiteStore", "sqlite_logical_fingerprint"]

LogicalOf = Callable[[sqlite3.Connection, Path], str]
"""How an item's logical fingerprint is read: from a read-only connection and the file's path."""

SharedCounts = OnceMap[tuple[str, tuple[str, ...], str], int]
"""Row counts by (content hash, denied tables, table)."""

PRISTINE_MTIME_NS = 1_000_000_000
"""The mtime a fresh copy gets (1970-01-01T00:00:01Z): a write sets the present instead."""
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


def _same_file_state(before: os.stat_result, now: os.stat_result) -> bool:
    """Nothing wrote the file between the two stats (same inode, size, times, mode)."""
    fields = ("st_ino", "st_size", "st_mtime_ns", "st_ctime_ns", "st_mode")
    return all(getattr(before, f) == getattr(now, f) for f in fields)


class SQLiteProvisionedStore(ProvisionedStore):
    """One item's read-only database file and the sessions opened on it."""

    backend = "sqlite"

    def __init__(
        self,
        path: Path,
        store_id: str,
        timeout_s: float,
        on_teardown: Callable[[str], object] | None = None,
        logical_cache: LogicalCache | None = None,
        denied: tuple[str, ...] = (),
        logical_of: LogicalOf | None = None,
        row_counts: SharedCounts | None = None,
    ) -> None:
        self.store_id = store_id
        self._shared_counts = row_counts
        self._logical_of = logical_of or (lambda conn, _path: sqlite_logical_fingerprint(conn))
        self._denied = denied
        self._path = path
        self._timeout_s = timeout_s
        self._on_teardown = on_teardown
        self._logical_cache = LogicalCache() if logical_cache is None else logical_cache
        self._sessions: list[SQLiteSession] = []
        self._torn_down = False
        self._pristine: tuple[os.stat_result, str] | None = None
        """The copy's stat right after provisioning and its template's hash. While the file's
        inode, size, mode, mtime (set to `PRISTINE_MTIME_NS`, which any write moves to the
        present) and ctime (which every write, chmod or utime moves) are those, nothing has
        written it, and its hash is the template's without reading it again."""

    @property
    def mount_path(self) -> Path:
        return self._path

    def mark_pristine(self, state: os.stat_result, physical: str) -> None:
        """The file is unwritten while its stat is `state` (inode, size, mode, mtime, ctime),
        and its bytes then hash to `physical`: fingerprints skip reading it until it moves."""
        self._pristine = (state, physical)

    def _check_live(self) -> None:
        if self._torn_down or not self._path.exists():
            raise StoreError(f"store {self.display_id} is torn down or its file is missing")

    def connect(self) -> SQLiteSession:
        self._check_live()
        session = SQLiteSession(self._path, self._timeout_s, self._denied, self._counts())
        self._sessions.append(session)
        return session

    def _counts(self) -> RowCounts | None:
        """Row counts by table, shared by every item of the same content and grants while this
        item's file is unwritten (a count reads the whole table: a second per GB)."""
        pristine, shared = self._pristine, self._shared_counts
        if pristine is None or shared is None:
            return None
        if not _same_file_state(pristine[0], self._path.stat()):
            return None
        key = (pristine[1], self._denied)
        return lambda table, count: shared.get((*key, table), count)

    def fingerprint(self) -> Fingerprint:
        """Logical and physical hashes; the logical one read through a private connection."""
        self._check_live()
        pristine = self._pristine
        if pristine is not None and _same_file_state(pristine[0], self._path.stat()):
            physical = pristine[1]
        else:
            self._pristine = None  # written once: hashed from now on
            physical = file_sha256(self._path)
        logical = self._logical_cache.get(physical, lambda: self._logical(physical))
        return Fingerprint(logical=logical, physical=physical)

    def _logical(self, physical: str) -> str:
        """The logical fingerprint, read through a private read-only connection; the file's
        stat (which every write moves) must be the same after as before."""
        before = self._path.stat()
        conn = connect_read_only(self._path)
        try:
            logical = self._logical_of(conn, self._path.resolve())
        except sqlite3.Error as exc:
            raise StoreError(f"cannot fingerprint store {self.display_id}: {exc}") from exc
        finally:
            conn.close()
        if not _same_file_state(before, self._path.stat()):
            raise StoreError(f"store {self.display_id} changed while it was fingerprinted")
        return logical

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
    denies_grants: ClassVar[bool] = True

    def __init__(self, workdir: Path, *, statement_timeout_s: float | None = None) -> None:
        super().__init__(workdir, statement_timeout_s=statement_timeout_s)
        self._templates = TemplateCache(self.workdir)
        self._live: dict[str, SQLiteProvisionedStore] = {}
        self._logical_cache = LogicalCache(self.workdir.parent / "logical", backend=self.name)
        """Shared by every process of this backend on the machine (`stores.logical_cache`)."""
        self._template_hashes = OnceMap[tuple[str, int, int, int], str]()
        self._row_counts = SharedCounts()

    def provision(self, dataset: DatasetFiles) -> SQLiteProvisionedStore:
        source = self._templates.template(dataset)
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
            denied=dataset.denied,
            row_counts=self._row_counts,
        )
        try:
            shutil.copyfile(source, dest)
            dest.chmod(0o444)
            os.utime(dest, ns=(PRISTINE_MTIME_NS, PRISTINE_MTIME_NS))
            store.mark_pristine(dest.stat(), self._template_hash(source))
        except OSError as exc:
            store.teardown()
            raise StoreError(f"cannot copy dataset {dataset.name!r} to {dest}: {exc}") from exc
        self._live[store_id] = store
        return store

    def _template_hash(self, template: Path) -> str:
        """The template's SHA-256, hashed once per state of the file."""
        state = template.stat()
        key = (str(template), state.st_size, state.st_mtime_ns, state.st_ino)
        return self._template_hashes.get(key, lambda: file_sha256(template))

    def teardown_session(self) -> None:
        """Tear down stores still alive and delete this process's built templates."""
        for store in list(self._live.values()):
            store.teardown()
        self._live.clear()
        self._templates.clear()
