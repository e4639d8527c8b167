"""The read-only query channel: how Python in the sandbox reads a store it cannot mount.

A PostgreSQL or ClickHouse store has no file to mount into the sandbox, and the sandbox has
no network. So the harness serves one Unix socket per sandbox (`QueryChannel`, a small server
thread in the harness process) whose folder the sandbox mounts read-only; code inside sends one
SQL statement at a time (`backintel_store.query`) and gets the rows back. Each statement runs
through one session from the item's own store (`ProvisionedStore.connect`, or over a data
probe the probe's session, so Python evidence is checked on perturbed data too): the same
read-only refusals, statement timeout and caps as the analyst's `run_sql`. The wire protocol
(length-prefixed JSON, values type-tagged so Decimal, dates, bytes and NULL round-trip) is
described and implemented in `pytest_backintel.sandbox.backintel_store`.

The client is untrusted: a request is at most `ChannelLimits.max_request_bytes` (a longer one is
refused unread) and must arrive whole within `io_timeout_s`; a reply the client does not read
within `io_timeout_s` ends its connection; at most `max_connections` are served at once (more
are told so and closed); garbage gets an error reply and the connection closed. Statements of
one channel run one at a time on one worker thread (the session's), so a channel never holds
more than one statement on the store. A failure of the store itself or of the harness's code
(not a query error) is kept in `QueryChannel.failure`, for the caller to report as infra_error.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from pytest_backintel.sandbox.backintel_store import (
    MAX_REQUEST_BYTES,
    encode_cell,
    send_frame,
)
from pytest_backintel.sandbox.base import CHANNEL_SOCKET
from stores.base import MAX_RESULT_BYTES, QueryError, QueryRefused, QueryTimeout, StoreSession

__all__ = ["ChannelLimits", "QueryChannel", "SessionSource"]

SessionSource = Callable[[], AbstractContextManager[StoreSession]]
"""Opens the session a channel's statements run through (`ProvisionedStore.connect`, or a data
probe's `DataProbe.session`); entered on the channel's worker thread on the first request."""

_LOG_BYTES = 8_000_000
"""The most text of distinct statements a channel keeps for `take_statements`."""
_SUN_PATH_MAX = 107
"""The longest Unix socket path the kernel takes (108 bytes with the terminating NUL)."""


@dataclass(frozen=True)
class ChannelLimits:
    """What one channel serves. The result caps are larger than `run_sql`'s 200 rows (a
    program reads tables whole), and a result past them is an error, never a silent part."""

    max_rows: int = 100_000
    max_bytes: int = 4 * MAX_RESULT_BYTES
    """The most bytes of cells one result carries (`StoreSession.run_sql`'s `max_bytes`)."""
    max_request_bytes: int = MAX_REQUEST_BYTES
    max_connections: int = 8
    io_timeout_s: float = 10.0
    """The longest a request may take to arrive whole, and a reply to be taken."""
    close_wait_s: float = 30.0
    """How long `close` waits for a running statement (the store's timeout ends it)."""


class _BadRequest(Exception):
    """The client sent something that is not a request; the connection is closed after."""

    def __init__(self, message: str, *, reply: bool = True) -> None:
        super().__init__(message)
        self.reply = reply


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"ok": False, "kind": kind, "error": message}


def _folder(parent: Path | None) -> Path:
    """A new private folder whose socket path fits the kernel's limit: under `parent` when it
    is short enough, else under the temporary folder, else /tmp."""
    candidates = [parent] if parent is not None else []
    candidates += [Path(tempfile.gettempdir()), Path("/tmp")]
    for base in candidates:
        # mkdtemp adds 8 characters to the prefix
        if len(os.fsencode(base / "biq-12345678" / CHANNEL_SOCKET)) <= _SUN_PATH_MAX:
            base.mkdir(parents=True, exist_ok=True)
            return Path(tempfile.mkdtemp(prefix="biq-", dir=base))
    raise OSError(f"no folder gives a Unix socket path under {_SUN_PATH_MAX + 1} bytes")


class QueryChannel:
    """One sandbox's read-only query channel: a Unix socket in `folder`, served until `close`.

    `foreign_uid`: the sandbox's code runs as another host uid (docker), so the socket is
    made connectable by any uid (its folder stays reachable only through `parent`)."""

    def __init__(
        self,
        session: SessionSource,
        *,
        parent: Path | None = None,
        limits: ChannelLimits | None = None,
        foreign_uid: bool = False,
    ) -> None:
        self.limits = limits or ChannelLimits()
        self._source = session
        self.folder = _folder(parent)
        self.socket_path = self.folder / CHANNEL_SOCKET
        self.failure: BaseException | None = None
        """The first failure of the store or of the harness's code behind a statement."""
        self.statements = 0
        """Statements run (refused and failed ones included)."""
        self.rejected = 0
        """Connections or requests turned away (too many, too large, not a request)."""
        self.unlogged = 0
        """Statements run but not kept for `take_statements` (past its size bound)."""
        self._log: dict[str, None] = {}
        self._log_bytes = 0
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._listener.bind(str(self.socket_path))
            if foreign_uid:
                self.folder.chmod(0o711)
                self.socket_path.chmod(0o777)
            self._listener.listen(self.limits.max_connections)
            self._listener.settimeout(0.2)  # the accept loop sees `close` within 0.2 s
        except BaseException:
            self._listener.close()
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="backintel-query")
        self._stack: ExitStack | None = None
        self._session: StoreSession | None = None
        self._clean = True
        """False once a statement raised: a probe's session is then closed, not reused."""
        self._acceptor = threading.Thread(
            target=self._accept_loop, name="backintel-query-accept", daemon=True
        )
        self._acceptor.start()

    # -- serving ---------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # the listener was closed
            with self._lock:
                busy = len(self._conns) >= self.limits.max_connections or self._closed.is_set()
                if not busy:
                    self._conns.add(conn)
            if busy:
                self.rejected += 1
                _reject(conn, f"at most {self.limits.max_connections} connections at once")
                continue
            threading.Thread(
                target=self._serve, args=(conn,), name="backintel-query-conn", daemon=True
            ).start()

    def _serve(self, conn: socket.socket) -> None:
        """Requests of one connection, one after another, until it closes or misbehaves."""
        try:
            while not self._closed.is_set():
                try:
                    message = self._read(conn)
                except _BadRequest as bad:
                    self.rejected += 1
                    if bad.reply:
                        conn.settimeout(self.limits.io_timeout_s)
                        send_frame(conn, _error("BadRequest", str(bad)))
                    return
                if message is None:
                    return
                reply = self._answer(message)
                conn.settimeout(self.limits.io_timeout_s)
                send_frame(conn, reply)
        except (OSError, ValueError):  # the client went away or stopped reading
            return
        finally:
            with self._lock:
                self._conns.discard(conn)
            with contextlib.suppress(OSError):
                conn.close()

    def _read(self, conn: socket.socket) -> dict[str, Any] | None:
        """One request, or None when the client closed cleanly between requests."""
        conn.settimeout(self.limits.io_timeout_s)
        first = conn.recv(4)
        if not first:
            return None
        deadline = time.monotonic() + self.limits.io_timeout_s
        header = first + _recv_until(conn, 4 - len(first), deadline)
        size = int.from_bytes(header, "big")
        if size > self.limits.max_request_bytes:
            raise _BadRequest(
                f"a request of {size} bytes is over the channel's "
                f"{self.limits.max_request_bytes}-byte limit"
            )
        body = _recv_until(conn, size, deadline)
        try:
            message = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise _BadRequest(f"the request is not JSON ({str(exc)[:200]})") from None
        if not isinstance(message, dict):
            raise _BadRequest('a request is a JSON object: {"sql": ...} or {"op": "tables"}')
        if message.get("op") == "tables":
            return message
        if not isinstance(message.get("sql"), str):
            raise _BadRequest('a request is a JSON object: {"sql": ...} or {"op": "tables"}')
        return message

    def _answer(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            future = self._worker.submit(self._execute, message)
        except RuntimeError:  # the channel is closing
            return _error("ChannelError", "the query channel is closed")
        return future.result()

    # -- the worker thread: the session and its statements ---------------------------------
    def _store_session(self) -> StoreSession:
        if self._session is None:
            stack = ExitStack()
            self._session = stack.enter_context(self._source())
            self._stack = stack
        return self._session

    def _execute(self, message: dict[str, Any]) -> dict[str, Any]:
        limits = self.limits
        try:
            session = self._store_session()
            if message.get("op") == "tables":
                return {"ok": True, "tables": list(session.list_tables())}
            self.statements += 1
            self._remember(message["sql"])
            result = session.run_sql(message["sql"], limits.max_rows, limits.max_bytes)
        except QueryError as exc:
            self._clean = False
            kind = (
                "QueryRefused"
                if isinstance(exc, QueryRefused)
                else "QueryTimeout"
                if isinstance(exc, QueryTimeout)
                else "QueryError"
            )
            return _error(kind, str(exc))
        except Exception as exc:  # the store itself or the harness's code: not the program's
            self.failure = self.failure or exc
            self._drop_session()
            return _error(
                "ChannelError",
                f"the harness could not run the statement ({type(exc).__name__}: {exc}); "
                "this is not your program's fault",
            )
        if result.truncated or result.cut_by_bytes:
            note = result.limit_note or f"more than {limits.max_rows} rows"
            return _error(
                "ResultTooLarge",
                f"the result is larger than the query channel returns ({note}); "
                "filter or aggregate in SQL",
            )
        rows = [[encode_cell(value) for value in row] for row in result.rows]
        return {"ok": True, "columns": list(result.columns), "rows": rows, **_cut(result)}

    def _remember(self, sql: str) -> None:
        with self._lock:
            if sql in self._log:
                return
            if self._log_bytes + len(sql) > _LOG_BYTES:
                self.unlogged += 1
                return
            self._log[sql] = None
            self._log_bytes += len(sql)

    def take_statements(self) -> list[str]:
        """The distinct statements sent since the last call, in order (to plan again what
        they read: a scenario's scope is observed on this path too)."""
        with self._lock:
            taken, self._log, self._log_bytes = list(self._log), {}, 0
        return taken

    def _drop_session(self) -> None:
        """Leave the session (on the worker thread): a probe's goes back to its pool only
        when every statement ran cleanly."""
        stack, self._stack, self._session = self._stack, None, None
        if stack is None:
            return
        with contextlib.suppress(Exception):
            if self._clean and self.failure is None:
                stack.close()
            else:
                why = RuntimeError("a statement over the query channel failed")
                stack.__exit__(RuntimeError, why, None)

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Stop serving, end every connection, leave the session, remove the socket; safe to
        call twice. A running statement is waited for at most `close_wait_s`."""
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._acceptor.join(timeout=5)
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        done = self._worker.submit(self._drop_session)
        self._worker.shutdown(wait=False)
        with contextlib.suppress(Exception):
            done.result(timeout=self.limits.close_wait_s)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cut(result: Any) -> dict[str, Any]:
    return {"cut_cells": result.cut_cells} if result.cut_cells else {}


def _recv_until(conn: socket.socket, size: int, deadline: float) -> bytes:
    """`size` bytes before `deadline`, else `_BadRequest` (a slow or silent client)."""
    chunks, left = [], size
    while left:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _BadRequest("the request did not arrive in time", reply=False)
        conn.settimeout(remaining)
        try:
            chunk = conn.recv(min(left, 1 << 16))
        except TimeoutError:
            raise _BadRequest("the request did not arrive in time", reply=False) from None
        if not chunk:
            raise _BadRequest("the connection closed inside a request", reply=False)
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _reject(conn: socket.socket, why: str) -> None:
    """Tell a connection it is not served, without waiting for it, and close it."""
    with contextlib.suppress(OSError):
        conn.setblocking(False)
        send_frame(conn, _error("ChannelError", why))
    with contextlib.suppress(OSError):
        conn.close()
