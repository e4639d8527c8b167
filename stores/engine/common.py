"""Shared DuckDB code: a guarded read-only analyst session and per-session templates.

Every DuckDB-backed store (`duckdb`, `lake-parquet`, `files`, `files-mixed`) hands the analyst a
connection opened by `open_guarded`: a database file opened `read_only=True`, extension
autoinstall/autoload off, external file access off except for the item's own folder, persistent
secrets off, and the configuration locked. On top of that engine guard, `check_statement` uses
DuckDB's own parser (not string matching) to admit exactly one SELECT (or EXPLAIN of one):
DuckDB's read-only mode still allows temporary tables, `SET VARIABLE`, and COPY/EXPORT into an
allowed folder, so those are refused by statement type before they reach the engine.
"""

from __future__ import annotations

import re
import threading
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb

from stores.base import (
    MAX_CELL_BYTES,
    MAX_RESULT_BYTES,
    MAX_ROWS,
    Column,
    Fingerprint,
    ProvisionedStore,
    QueryError,
    QueryRefused,
    QueryResult,
    QueryTimeout,
    StoreError,
    StoreSession,
    TableInfo,
)
from stores.common.caps import ResultCollector, cell_cap, statement_body
from stores.common.fingerprint_cache import read_logical, write_logical
from stores.engine.caps import duckdb_capped_select, duckdb_infinite_columns
from stores.engine.folders import copy_folder, remove_folder, template_dir
from stores.engine.plans import DuckDBPlans
from stores.engine.policy import check_functions, classify_error, quote_literal
from stores.engine.process import IsolatedSession
from stores.fingerprint import SUMMARY_VERSION, summary_digest, tree_sha256

__all__ = [
    "FINGERPRINT_METHOD",
    "DuckDBSession",
    "FolderItem",
    "cached_fingerprint",
    "check_statement",
    "copy_folder",
    "logical_fingerprint",
    "open_guarded",
    "quote_ident",
    "quote_literal",
    "remove_folder",
    "template_dir",
    "to_cell",
    "tree_sha256",
]

BASE_CONFIG: dict[str, str] = {
    "autoinstall_known_extensions": "false",
    "autoload_known_extensions": "false",
    "allow_community_extensions": "false",
    "allow_persistent_secrets": "false",
    "threads": "1",
    "memory_limit": "1GB",
}
"""Set at connect time, before anything runs: nothing is installed or loaded behind our back."""

_ALLOWED = {duckdb.StatementType.SELECT}
_EXPLAIN = re.compile(r"^\s*explain\s+(analyze\s+)?", re.IGNORECASE)


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def open_guarded(db_path: Path, *, allowed_dirs: Sequence[Path] = ()) -> duckdb.DuckDBPyConnection:
    """`db_path` opened read-only; file access only under `allowed_dirs`; configuration locked."""
    try:
        conn = duckdb.connect(str(db_path), read_only=True, config=dict(BASE_CONFIG))
    except duckdb.Error as exc:
        raise StoreError(f"cannot open DuckDB store {db_path}: {exc}") from exc
    if allowed_dirs:
        dirs = ", ".join(quote_literal(str(d).rstrip("/") + "/") for d in allowed_dirs)
        conn.execute(f"SET allowed_directories = [{dirs}]")
    conn.execute("SET temp_directory = ''")
    conn.execute("SET enable_external_access = false")
    conn.execute("SET lock_configuration = true")
    return conn


def check_statement(conn: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Admit exactly one SELECT (or EXPLAIN of one), classified by DuckDB's parser, whose
    functions pass `stores.engine.policy.check_functions`."""
    try:
        statements = conn.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"could not parse the SQL: {exc}") from exc
    if len(statements) != 1:
        raise QueryRefused(
            f"send exactly one statement per run_sql call (got {len(statements)}); "
            "only a single read-only SELECT is allowed"
        )
    kind = statements[0].type
    if kind == duckdb.StatementType.EXPLAIN:
        inner = _EXPLAIN.sub("", sql, count=1)
        inner_types = [s.type for s in conn.extract_statements(inner)] if inner != sql else []
        if inner_types == [duckdb.StatementType.SELECT]:
            check_functions(conn, inner)
            return
    if kind not in _ALLOWED:
        raise QueryRefused(
            f"{kind.name} statements are refused: this store is read-only and only a single "
            "SELECT (WITH ..., FROM ..., DESCRIBE, SHOW, SUMMARIZE) or EXPLAIN of one is allowed; "
            "writes, DDL, temporary tables, ATTACH, COPY, INSTALL/LOAD, SET and PRAGMA are not"
        )
    check_functions(conn, sql)


_BATCH = 64


def to_cell(value: Any) -> Any:
    """A DuckDB value as a `Cell`: plain scalars pass; UUID, interval, list etc. become text."""
    if value is None or isinstance(value, int | float | str | bytes | Decimal | date | datetime):
        return value
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    return str(value)


def _cells(row: tuple[Any, ...], width: int, infinite: list[int]) -> tuple[Any, ...]:
    """A row of `duckdb_capped_select` as cells: an infinite date or timestamp as the text
    'infinity'/'-infinity' (as PostgreSQL's are), not DuckDB's 9999-12-31/0001-01-01."""
    cells = [to_cell(v) for v in row[:width]]
    for i, named in zip(infinite, row[width:], strict=True):
        if named is not None:
            cells[i] = named
    return tuple(cells)


class DuckDBSession(DuckDBPlans, StoreSession):
    """A guarded read-only DuckDB connection with a per-statement timeout."""

    def __init__(self, conn: duckdb.DuckDBPyConnection, *, timeout_s: float, where: str) -> None:
        self._conn = conn
        self._timeout_s = timeout_s
        self._where = where
        self._lock = threading.Lock()

    def set_time_limit(self, seconds: float) -> float:
        self._timeout_s = seconds
        return seconds

    def list_tables(self) -> list[str]:
        rows = self._conn.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'main' AND table_catalog = current_database() ORDER BY 1"
        ).fetchall()
        return [str(r[0]) for r in rows]

    def describe_table(self, name: str) -> TableInfo:
        known = self.list_tables()
        if name not in known:
            raise QueryError(
                f"unknown table {name!r} on {self._where}; tables are: {', '.join(known)}"
            )
        cols = self._conn.execute(
            "SELECT column_name, data_type, is_nullable = 'YES' FROM information_schema.columns "
            "WHERE table_schema = 'main' AND table_catalog = current_database() "
            f"AND table_name = {quote_literal(name)} ORDER BY ordinal_position"
        ).fetchall()
        count = self._conn.execute(f"SELECT count(*) FROM {quote_ident(name)}").fetchone()
        return TableInfo(
            name=name,
            columns=[Column(str(c), str(t), bool(n)) for c, t, n in cols],
            row_count=int(count[0]) if count else 0,
        )

    def run_sql(
        self, sql: str, max_rows: int = MAX_ROWS, max_bytes: int = MAX_RESULT_BYTES
    ) -> QueryResult:
        """One checked SELECT, wrapped (`stores.engine.caps.duckdb_capped_select`) so DuckDB cuts
        every variable-length cell and stops at `max_rows + 1` rows before Python sees them."""
        check_statement(self._conn, sql)
        body = statement_body(sql)
        with self._lock, _interrupt_after(self._conn, self._timeout_s) as fired:
            try:
                infinite: list[int] = []
                if _EXPLAIN.match(body):
                    cursor = self._conn.execute(body)
                    columns = [d[0] for d in cursor.description or []]
                    cap = MAX_CELL_BYTES
                else:
                    relation = self._conn.sql(body)
                    columns = list(relation.columns)
                    cap = cell_cap(len(columns), max_rows, max_bytes)
                    kinds = [t.id for t in relation.types]
                    infinite = duckdb_infinite_columns(kinds)
                    cursor = self._conn.execute(duckdb_capped_select(body, kinds, cap, max_rows))
                out = ResultCollector(columns, max_rows, max_bytes, cap)
                while (batch := cursor.fetchmany(_BATCH)) and out.extend(
                    _cells(row, len(columns), infinite) for row in batch
                ):
                    pass
            except duckdb.Error as exc:
                if fired.is_set():
                    raise QueryTimeout(
                        f"statement ran past the {self._timeout_s:g}s limit on {self._where} "
                        "and was interrupted; aggregate more or filter earlier"
                    ) from exc
                raise classify_error(exc, self._where) from exc
        return out.result()

    def close(self) -> None:
        self._conn.close()


class _interrupt_after:  # noqa: N801 - used as a context manager
    """Call `conn.interrupt()` after `seconds` unless the block finished first."""

    def __init__(self, conn: duckdb.DuckDBPyConnection, seconds: float) -> None:
        self._conn = conn
        self._fired = threading.Event()
        self._done = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def _fire(self) -> None:
        with self._done:
            self._fired.set()
            self._conn.interrupt()

    def __enter__(self) -> threading.Event:
        self._timer.start()
        return self._fired

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        with self._done:  # a timer already inside _fire finishes before we return
            pass


def logical_fingerprint(conn: duckdb.DuckDBPyConnection) -> str:
    """`stores.fingerprint.summary_digest` over every table/view in `main`, computed in DuckDB.

    Per table (name order): its (column, type) pairs from DESCRIBE and, over the per-row hash
    `h = hash(c1, ..., cn)`, `count(*)`, `sum(h::HUGEINT)` and `bit_xor(h)`. DuckDB's `hash`
    gives NULL its own constant (`hash(NULL) != hash(0) != hash('')`), is a bijection on
    integers and chains columns by multiply-and-xor, so the row hash is injective in each cell:
    changing any one cell changes the row hash and hence the (exact, 128-bit) sum, while the
    aggregates ignore row order. Equal values of one column type hash equal (`-0.0` and `0.0`,
    every NaN), as SQL compares them; types are in the header, so `1` and `1.0` differ there.
    """
    tables = [
        str(r[0])
        for r in conn.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'main' AND table_catalog = current_database() ORDER BY 1"
        ).fetchall()
    ]
    summaries: list[tuple[str, list[tuple[str, str]], tuple[object, ...]]] = []
    for table in tables:
        described = conn.execute(f"DESCRIBE {quote_ident(table)}").fetchall()
        columns = [(str(r[0]), str(r[1])) for r in described]
        row_hash = f"hash({', '.join(quote_ident(c) for c, _ in columns)})"
        summary = conn.execute(
            f"SELECT count(*), sum(h::HUGEINT), bit_xor(h) "
            f"FROM (SELECT {row_hash} AS h FROM {quote_ident(table)})"
        ).fetchone()
        summaries.append((table, columns, tuple(summary or ())))
    return summary_digest(summaries)


FINGERPRINT_METHOD = f"{SUMMARY_VERSION.decode()}/duckdb-{duckdb.__version__}"
"""What names a logical fingerprint kept on disk besides the physical hash (`fingerprint_cache`):
the summary's version and the engine that computed it."""

_LOGICAL_CACHE: OrderedDict[str, str] = OrderedDict()
_CACHE_SIZE = 256
_CACHE_LOCK = threading.Lock()


def _tree_state(root: Path) -> list[tuple[str, int, int, int]]:
    """(path, inode, size, mtime) of every file under `root`: a cheap "did anything change"."""
    out = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        st = path.stat()
        out.append((path.as_posix(), st.st_ino, st.st_size, st.st_mtime_ns))
    return out


def cached_fingerprint(
    root: Path,
    hashes: Callable[[], tuple[str, str]],
    connect: Callable[[], duckdb.DuckDBPyConnection],
    where: str,
) -> Fingerprint:
    """The physical hash (exact sha256 of the item's files under `root`) and the logical one,
    computed through `connect()` only when neither this process (by physical hash) nor the
    cache on disk (`fingerprint_cache`, by the content key) has seen it. `hashes()` gives both:
    identical bytes hold identical content, so the physical hash is a content key, and an item
    whose files name its own folder gives one that does not (`FolderItem._content_hashes`).
    Raises `StoreError` when a file under `root` changed while the logical fingerprint was
    computed."""
    state = _tree_state(root)
    digest, key = hashes()
    with _CACHE_LOCK:
        logical = _LOGICAL_CACHE.get(digest)
    if logical is None:
        logical = read_logical(key, FINGERPRINT_METHOD)
    if logical is not None:
        _remember(digest, logical)
        return Fingerprint(logical=logical, physical=digest)
    conn = connect()
    try:
        logical = logical_fingerprint(conn)
    except duckdb.Error as exc:
        raise StoreError(f"cannot fingerprint store {where}: {exc}") from exc
    finally:
        conn.close()
    if _tree_state(root) != state:
        raise StoreError(f"store {where} changed while it was fingerprinted")
    _remember(digest, logical)
    write_logical(key, FINGERPRINT_METHOD, logical)
    return Fingerprint(logical=logical, physical=digest)


def _remember(digest: str, logical: str) -> None:
    with _CACHE_LOCK:
        _LOGICAL_CACHE[digest] = logical
        _LOGICAL_CACHE.move_to_end(digest)
        while len(_LOGICAL_CACHE) > _CACHE_SIZE:
            _LOGICAL_CACHE.popitem(last=False)


class FolderItem(ProvisionedStore):
    """An item that is one folder served through a guarded DuckDB connection: subclasses say
    how to open it (`_open`) and, when more than its files count, how to hash it."""

    def __init__(self, backend: str, store_id: str, root: Path, timeout_s: float) -> None:
        self.backend = backend
        self.store_id = store_id
        self.root = root
        self._timeout_s = timeout_s

    @abstractmethod
    def _open(self) -> duckdb.DuckDBPyConnection: ...

    def _physical(self) -> str:
        return tree_sha256(self.root)

    def _content_hashes(self) -> tuple[str, str]:
        """(physical hash, the key of its logical fingerprint on disk): here the same."""
        physical = self._physical()
        return physical, physical

    def _require(self) -> None:
        if not self.root.is_dir():
            raise StoreError(f"{self.display_id} was torn down; provision a new store")

    def engine_connection(self) -> duckdb.DuckDBPyConnection:
        """The guarded DuckDB connection alone, without the statement check (tests use it to
        show the engine guard holds by itself)."""
        self._require()
        return self._open()

    def local_session(self) -> DuckDBSession:
        """The guarded session in this process (`connect` runs it in a child process)."""
        return DuckDBSession(
            self.engine_connection(), timeout_s=self._timeout_s, where=self.display_id
        )

    def connect(self) -> IsolatedSession:
        return IsolatedSession(self.local_session, where=self.display_id, timeout_s=self._timeout_s)

    def fingerprint(self) -> Fingerprint:
        """Physical: sha256 of the item's files (`_physical`); logical: computed in DuckDB,
        cached per physical hash (`cached_fingerprint`)."""
        self._require()
        return cached_fingerprint(
            self.root, self._content_hashes, self.engine_connection, self.display_id
        )

    def teardown(self) -> None:
        remove_folder(self.root)
