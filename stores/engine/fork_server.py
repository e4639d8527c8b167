"""A fork server: engine children forked from a small process that never runs a statement.

Forking the harness itself is unsafe: it has threads (trials, query channels, probe builds)
that may be inside DuckDB when another thread forks, and the child inherits DuckDB's global
state mid-change (a child that aborted with `malloc(): unsorted double linked list corrupted`
while opening its session) or a lock held by a thread that does not exist in it (a child that
hung opening a file the harness had open). `ForkServer` starts a fresh interpreter once per
harness process, imports the engine modules in it, and forks every child from there: one
thread (`_ONE_THREAD` keeps OpenBLAS and Arrow's jemalloc from starting theirs, and DuckDB's
default connection is closed), no engine open, no lock held.

A child gets its work over its own pipe: the harness's current environment, working folder and
`sys.path`, then a pickled `target(pipe, *args)` to run. Standard output and error are the
harness's at the time of the fork (so what a child prints lands in the current test's capture).
The server exits when the harness closes its end (also on `kill -9`); a child that sets
`PR_SET_PDEATHSIG` then dies with it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["Child", "ForkServer", "shared"]

_PID = struct.Struct("q")
_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "JE_ARROW_MALLOC_CONF": "background_thread:false"}
"""The server's own environment on top of the harness's (a child gets the harness's back)."""
_BOOT = (
    "import sys, json; sys.path[:] = json.loads(sys.argv[2]); "
    "from stores.engine.fork_server import main; main()"
)


class Child:
    """A process forked by the server (not the harness's child: it is watched by a pidfd)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._fd: int | None = None
        with contextlib.suppress(ProcessLookupError):  # already gone: never alive
            self._fd = os.pidfd_open(pid)

    def is_alive(self) -> bool:
        return self._fd is not None and not select.select([self._fd], [], [], 0)[0]

    def join(self, timeout: float | None = None) -> None:
        """Wait until the child has ended (or `timeout` seconds)."""
        if self._fd is not None:
            select.select([self._fd], [], [], timeout)

    def kill(self) -> None:
        if self.is_alive():
            assert self._fd is not None
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._fd, signal.SIGKILL)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class ForkServer:
    """One server process and the harness's end of its control socket."""

    def __init__(self, preload: Sequence[str]) -> None:
        ours, theirs = socket.socketpair()
        self._process = subprocess.Popen(
            [sys.executable, "-c", _BOOT, str(theirs.fileno()), json.dumps(sys.path), *preload],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            env={**os.environ, **_ONE_THREAD},
        )
        theirs.close()
        self._control = ours
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        return self._process.pid

    def alive(self) -> bool:
        return self._process.poll() is None

    def fork(self, target: Callable[..., object], *args: Any) -> tuple[Child, Connection]:
        """Start `target(pipe, *args)` in a new child; the child and the harness's end of the
        pipe. Raises `OSError` if the server is gone, `pickle` errors if the work cannot go."""
        work = pickle.dumps((target, args))  # fails here, in the harness, if it cannot pickle
        mine, theirs = socket.socketpair()
        try:
            with self._lock:
                fds = [theirs.fileno(), 1, 2]
                socket.send_fds(self._control, [b"f"], fds)
                pid = _PID.unpack(_read_exact(self._control, _PID.size))[0]
        finally:
            theirs.close()
        pipe = Connection(mine.detach())
        pipe.send((dict(os.environ), os.getcwd(), list(sys.path), work))
        return Child(pid), pipe

    def close(self) -> None:
        self._control.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(5)


_servers: dict[tuple[int, tuple[str, ...]], ForkServer] = {}
_servers_lock = threading.Lock()


def shared(preload: Sequence[str]) -> ForkServer:
    """This process's server for `preload` (started on first use, again if it died)."""
    key = (os.getpid(), tuple(preload))
    with _servers_lock:
        server = _servers.get(key)
        if server is None or not server.alive():
            server = _servers[key] = ForkServer(preload)
        return server


def _read_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise OSError("the fork server ended")
        data += chunk
    return data


def main() -> None:
    """The server: import the preload modules, then fork one child per request until the
    harness closes the control socket."""
    control = socket.socket(fileno=int(sys.argv[1]))
    for name in sys.argv[3:]:
        with contextlib.suppress(Exception):  # a child that needs it reports the error
            importlib.import_module(name)
    with contextlib.suppress(Exception):  # DuckDB's default connection keeps worker threads
        sys.modules["duckdb"].default_connection().close()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1, 3)
        except OSError:
            break
        if not message:
            break
        pid = os.fork()
        if pid == 0:
            control.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os._exit(_child(*fds))
        for fd in fds:
            os.close(fd)
        try:
            control.sendall(_PID.pack(pid))
        except OSError:
            break


def _child(pipe_fd: int, stdout_fd: int, stderr_fd: int) -> int:
    """In the child: take the harness's stdout/stderr, environment, folder and path, run the
    work. Its exit status is 0 when the work returned."""
    os.dup2(stdout_fd, 1)
    os.dup2(stderr_fd, 2)
    os.close(stdout_fd)
    os.close(stderr_fd)
    pipe = Connection(pipe_fd)
    try:
        environ, cwd, path, work = pipe.recv()
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd)
        sys.path[:] = path
        target, args = pickle.loads(work)
        target(pipe, *args)
    except BaseException:
        traceback.print_exc()
        return 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
    return 0
