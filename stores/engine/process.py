"""The analyst's DuckDB session in a child process of its own, under a hard memory cap.

DuckDB's `memory_limit` covers only what its buffer manager allocates: constant folding and
bind-time evaluation (`SELECT repeat('x', 600000000)`, `FROM repeat(repeat('x', 6e8), 4)`,
`LIMIT length(...)`) build the value with plain `malloc`, so no setting keeps such a statement
out of the process that runs it. `IsolatedSession` therefore runs the guarded `DuckDBSession`
(statement check, byte caps, timeout) in a child process whose address space may grow by at
most `ENGINE_MEMORY_BYTES`; the harness only ever receives the capped `QueryResult`. A child
that runs out of memory, crashes or hangs past the statement limit is killed and reported as
a `QueryError`; the next call starts a fresh child. Children are forked by a fork server
(`stores.engine.fork_server`), never by the harness, whose other threads may be inside DuckDB.
"""

from __future__ import annotations

import contextlib
import ctypes
import pickle
import resource
import signal
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from stores.base import (
    MAX_RESULT_BYTES,
    MAX_ROWS,
    QueryError,
    QueryResult,
    QueryTimeout,
    StoreError,
    StoreSession,
    TableInfo,
)
from stores.engine import fork_server

__all__ = ["ENGINE_MEMORY_BYTES", "IsolatedSession"]

ENGINE_MEMORY_BYTES = 2 * 1024**3
"""Address space a session's child may add to what it inherits: DuckDB's own 1 GB
`memory_limit` plus room for what DuckDB allocates outside it."""
_GRACE_S = 15.0
"""How long past the statement limit the child may take to answer before it is killed."""
_PR_SET_PDEATHSIG = 1
_PRELOAD = (
    "stores.engine.process",
    "stores.duckdb.store",
    "stores.duckdb.source",
    "stores.duckdb.probe",
    "stores.files.store",
    "stores.files.lake",
    "stores.iceberg.store",
    "stores.iceberg.s3",
    "stores.multi.store",
)
"""What the fork server imports once, so a child does not import it again."""


def _vm_size() -> int:
    """This process's current address space in bytes."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _portable(exc: BaseException) -> Exception:
    """`exc` if it is one of the store's errors (they pickle), else a `QueryError` saying it."""
    if isinstance(exc, QueryError | StoreError) and type(exc).__module__ == "stores.base":
        return type(exc)(*exc.args)
    if isinstance(exc, MemoryError):
        return QueryError("the statement needed more memory than the session allows")
    return QueryError(f"{type(exc).__name__}: {exc}")


def _serve(pipe: Connection, open_session: Callable[[], StoreSession], memory: int) -> None:
    """The child: cap memory, open the session, answer (method, args) until told to stop."""
    with contextlib.suppress(OSError, AttributeError):  # die with the fork server (and harness)
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    limit = _vm_size() + memory
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        session = open_session()
    except BaseException as exc:
        pipe.send(("err", _portable(exc)))
        return
    pipe.send(("ok", None))
    while True:
        try:
            message = pipe.recv()
        except (EOFError, OSError):
            break
        if message is None:
            break
        method, args = message
        try:
            reply: tuple[str, Any] = ("ok", getattr(session, method)(*args))
        except BaseException as exc:
            reply = ("err", _portable(exc))
        pipe.send(reply)
    with contextlib.suppress(Exception):
        session.close()


class IsolatedSession(StoreSession):
    """A `StoreSession` whose engine runs in a child process (see the module docstring)."""

    def __init__(
        self,
        open_session: Callable[[], StoreSession],
        *,
        where: str,
        timeout_s: float,
        memory_bytes: int = ENGINE_MEMORY_BYTES,
    ) -> None:
        self._open = open_session
        self._where = where
        self._timeout_s = timeout_s
        self._memory = memory_bytes
        self._lock = threading.Lock()
        self._proc: fork_server.Child | None = None
        self._pipe: Connection | None = None
        with self._lock:
            self._start()

    def _start(self) -> None:
        try:
            server = fork_server.shared(_PRELOAD)
            self._proc, self._pipe = server.fork(_serve, self._open, self._memory)
        except (OSError, pickle.PicklingError, AttributeError, TypeError) as exc:
            raise StoreError(f"cannot start the engine process of {self._where}: {exc}") from exc
        self._reply("opening the session")

    def _stop(self, *, kill: bool) -> None:
        proc, pipe, self._proc, self._pipe = self._proc, self._pipe, None, None
        if pipe is not None:
            with contextlib.suppress(OSError):
                if not kill:
                    pipe.send(None)
            pipe.close()
        if proc is not None:
            if not kill:  # told to stop: a few seconds to close its session
                proc.join(5)
            if proc.is_alive():  # a child stuck in its engine never reads the pipe
                proc.kill()
            proc.join()
            proc.close()

    def _reply(self, what: str) -> Any:
        assert self._pipe is not None
        if not self._pipe.poll(self._timeout_s + _GRACE_S):
            self._stop(kill=True)
            raise QueryTimeout(
                f"{what} did not finish within the {self._timeout_s:g}s limit on {self._where}; "
                "its engine process was stopped"
            )
        try:
            status, value = self._pipe.recv()
        except (EOFError, OSError):
            self._stop(kill=True)
            raise QueryError(
                f"{what} was stopped on {self._where}: its engine process ended, most likely "
                f"because the statement needed more than the session's "
                f"{self._memory // 2**20} MB of memory; aggregate or cut values in SQL"
            ) from None
        if status == "err":
            if "Out of Memory" in str(value):  # DuckDB may be unsafe to reuse after one
                self._stop(kill=True)
            raise value
        return value

    def _call(self, method: str, *args: Any) -> Any:
        with self._lock:
            if self._proc is None:
                self._start()
            assert self._pipe is not None
            self._pipe.send((method, args))
            return self._reply(f"{method}()")

    def list_tables(self) -> list[str]:
        tables: list[str] = self._call("list_tables")
        return tables

    def describe_table(self, name: str) -> TableInfo:
        info: TableInfo = self._call("describe_table", name)
        return info

    def run_sql(
        self, sql: str, max_rows: int = MAX_ROWS, max_bytes: int = MAX_RESULT_BYTES
    ) -> QueryResult:
        result: QueryResult = self._call("run_sql", sql, max_rows, max_bytes)
        return result

    def tables_read(self, sql: str) -> set[str] | None:
        tables: set[str] | None = self._call("tables_read", sql)
        return tables

    def set_time_limit(self, seconds: float) -> float | None:
        """The child session's limit, and this side's wait for its replies, moved together."""
        limit: float | None = self._call("set_time_limit", seconds)
        if limit is not None:
            self._timeout_s = seconds
        return limit

    def close(self) -> None:
        with self._lock:
            self._stop(kill=False)
