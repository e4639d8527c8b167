"""The zygote (standard library only, shipped into the sandbox): one sandboxed interpreter that
has imported the scientific stack and forks a child per Python evidence run.

It runs as `python -s -c "import _zygote; _zygote.main()" SPEC` inside a bwrap sandbox with
nothing mounted but the read-only root and empty tmpfs folders. SPEC is a JSON object:
`preload` (modules to import once), `seed` and `control`. The host talks to it over fd
`control`, a SOCK_SEQPACKET
socket: each request is `{"op": "run", "env": ..., "rlimits": ..., "store": name | null,
"query": bool}` with the descriptors stdout, stderr, status, code[, store file][, channel]
attached (SCM_RIGHTS); the zygote answers `{"done": true}` once the run is over and the sandbox
is clean again. A child sees only what its request gave it: it closes every other descriptor
(the control socket included) before the program runs, and gets the store as a private copy
in /data/store. After each child the zygote kills every other process of the sandbox, removes
SysV IPC objects and empties every writable folder, so nothing a run leaves reaches the next.
The zygote is not dumpable (a child can neither ptrace it nor read its memory); children cannot
use kernel keyrings or POSIX message queues (seccomp: they would outlive the run).
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import ctypes
import json
import os
import resource
import shutil
import signal
import socket
import stat
import sys
import threading
import types
from typing import Any, NoReturn

CHANNEL_FD = 3
"""Where a child finds its query channel's connected socket ($BACKINTEL_QUERY_FD)."""
STORE_DIR = "/data/store"
WRITABLE = ("/tmp", "/workspace", "/dev/shm", STORE_DIR)
_PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER, _PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP = 4, 36, 38, 22
_DENIED = {
    # machine: (audit arch, [add_key, request_key, keyctl, mq_open])
    "x86_64": (0xC000003E, [248, 249, 250, 240]),
    "aarch64": (0xC00000B7, [217, 218, 219, 180]),
}
_ENOSYS = 38
_libc = ctypes.CDLL(None, use_errno=True)


class _Filter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint),
    ]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def _seccomp() -> None:
    """Deny the calls whose objects would outlive the child: keyrings (add_key, request_key,
    keyctl), POSIX message queues (mq_open); and any other ABI (x32, 32-bit)."""
    arch, calls = _DENIED[os.uname().machine]
    deny = 0x00050000 | _ENOSYS
    code = [(0x20, 0, 0, 4), (0x15, 1, 0, arch), (0x06, 0, 0, deny), (0x20, 0, 0, 0)]
    code.append((0x35, len(calls) + 1, 0, 0x40000000))  # x32 numbers
    for index, nr in enumerate(calls):
        code.append((0x15, len(calls) - index, 0, nr))
    code += [(0x06, 0, 0, 0x7FFF0000), (0x06, 0, 0, deny)]
    filters = (_Filter * len(code))(*[_Filter(*c) for c in code])
    program = _Program(len(code), filters)
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if _libc.prctl(_PR_SET_SECCOMP, 2, ctypes.byref(program), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")


def _copy_store(fd: int, name: str) -> None:
    """The store's bytes from `fd` into a private file STORE_DIR/name, read-only."""
    target = os.path.join(STORE_DIR, os.path.basename(name))
    with os.fdopen(fd, "rb") as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.chmod(target, 0o444)


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _run_code(code: str) -> int:
    """Run `code` as `python -c` would, as __main__; its exit code."""
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    sys.argv = ["-c"]
    try:
        exec(compile(code, "<string>", "exec", dont_inherit=True), main.__dict__)
        rc = 0
    except SystemExit as exc:
        rc = _exit_code(exc)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        rc = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # join non-daemon threads
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        rc = rc or 120
    return rc


def _reseed(seed: int) -> None:
    """The generators the sandbox seeds at import (`_seeding.py`), as a fresh run has them."""
    if "random" in sys.modules:
        sys.modules["random"].seed(seed)
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed(seed)


def _apply_rlimits(rlimits: dict[str, list[int]]) -> None:
    """The run's rlimits, with the memory the zygote had mapped before the fork (the
    preloaded modules, which are the harness's) not counted against RLIMIT_DATA and RLIMIT_AS."""
    held = {}
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmData", "VmSize"):
                held[key] = int(value.split()[0]) * 1024
    extra = {"RLIMIT_DATA": held.get("VmData", 0), "RLIMIT_AS": held.get("VmSize", 0)}
    for name, (soft, hard) in rlimits.items():
        more = extra.get(name, 0)
        resource.setrlimit(getattr(resource, name), (soft + more, hard + more))


def _child(request: dict[str, Any], fds: list[int], seed: int) -> NoReturn:
    """Set up the child's descriptors, store, environment and limits, then run its code."""
    try:
        out, err, status, code_fd, *rest = fds
        os.close(status)
        with os.fdopen(code_fd, "rb") as fh:
            code = fh.read().decode("utf-8")
        if request.get("store"):
            _copy_store(rest.pop(0), request["store"])
        channel = rest.pop(0) if request.get("query") else None
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        if channel is not None:
            os.dup2(channel, CHANNEL_FD)
            os.set_inheritable(CHANNEL_FD, True)
        os.closerange(CHANNEL_FD + 1 if channel is not None else CHANNEL_FD, 65536)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir("/workspace")
        _libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _seccomp()
        _apply_rlimits(request["rlimits"])
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        _reseed(seed)
    except BaseException as exc:
        os.write(2, f"sandbox: the run could not be set up: {exc!r}\n".encode())
        os._exit(127)
    os._exit(_run_code(code))


def _others() -> list[int]:
    """Processes of the sandbox but its init and this one."""
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]


def _kill_others() -> None:
    for _ in range(1000):
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        if not _others():
            return
    raise RuntimeError(f"processes survive SIGKILL: {_others()}")


def _remove_ipc() -> None:
    """Remove every SysV shared memory segment, semaphore set and message queue."""
    for table in ("shm", "sem", "msg"):
        with open(f"/proc/sysvipc/{table}", encoding="ascii") as fh:
            rows = fh.read().splitlines()[1:]
        for row in rows:
            ident = int(row.split()[1])
            if table == "shm":
                _libc.shmctl(ident, 0, None)  # IPC_RMID
            elif table == "sem":
                _libc.semctl(ident, 0, 0)
            else:
                _libc.msgctl(ident, 0, None)


def _wipe(modes: dict[str, int]) -> None:
    """Empty every writable folder (entries the run made unreadable made removable first)."""

    def unlock(_func: Any, path: str, _exc: Any) -> None:
        os.chmod(os.path.dirname(path), 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
            shutil.rmtree(path, onerror=unlock)
        else:
            os.unlink(path)

    for folder, mode in modes.items():
        os.chmod(folder, mode)
        for entry in os.scandir(folder):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, onerror=unlock)
            else:
                os.unlink(entry.path)
        if os.listdir(folder):
            raise RuntimeError(f"{folder} could not be emptied")


def _serve(control: socket.socket, seed: int, modes: dict[str, int]) -> None:
    while True:
        data, fds, _flags, _addr = socket.recv_fds(control, 1 << 16, 8)
        if not data:
            return
        request = json.loads(data)
        pid = os.fork()
        if pid == 0:
            _child(request, fds, seed)
        status = fds[2]
        for fd in fds:
            if fd != status:
                os.close(fd)
        os.write(status, b'{"started": true}\n')
        _, wait_status, usage = os.wait4(pid, 0)
        sig = os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else None
        record = {
            "returncode": -sig if sig is not None else os.WEXITSTATUS(wait_status),
            "signal": sig,
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 4),
            "maxrss_kb": usage.ru_maxrss,
        }
        os.write(status, (json.dumps(record) + "\n").encode())
        os.close(status)
        _kill_others()
        _remove_ipc()
        _wipe(modes)
        control.send(b'{"done": true}')


_FORK_SAFE = {"jemalloc_bg_thd", "polars-ooc-clea"}
"""Threads a child may do without: jemalloc restarts its background threads after a fork, and
polars' out-of-core clean-up thread only removes spill files, which a child leaves in /tmp."""


def _unsafe_threads() -> list[str]:
    """Names of this process's other threads that a forked child would miss."""
    me, names = str(threading.get_native_id()), []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/comm", encoding="utf-8") as fh:
            name = fh.read().strip()
        if task != me and name not in _FORK_SAFE:
            names.append(name)
    return names


def main() -> None:
    spec = json.loads(sys.argv[1])
    control = socket.socket(fileno=int(spec["control"]))
    _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    problem = "" if os.uname().machine in _DENIED else f"no seccomp table for {os.uname().machine}"
    for name in spec["preload"]:
        with contextlib.suppress(Exception):  # a library missing is the program's to find
            __import__(name)
    if threading.active_count() > 1 or _unsafe_threads():
        problem = f"the preloaded modules started threads a fork would lose: {_unsafe_threads()}"
    modes = {folder: stat.S_IMODE(os.stat(folder).st_mode) for folder in WRITABLE}
    control.send(json.dumps({"ready": not problem, "problem": problem}).encode())
    if not problem:
        _serve(control, int(spec["seed"]), modes)
