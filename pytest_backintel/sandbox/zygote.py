"""Python evidence re-runs forked from a zygote: one start-up of the scientific stack per harness
process instead of one per run.

A zygote (`_zygote.py`) is a bwrap sandbox with the same flags as the evidence sandbox (every
namespace unshared, no user namespaces inside, no capabilities, the run's cgroup limits) that has
imported NumPy, polars, pandas, scikit-learn and `backintel_store`, and has no store mounted.
Each run is one child of it, forked on request; the host passes the child everything it may see
as descriptors (SCM_RIGHTS): its stdout, stderr and status pipes, its code, the store file (the
child reads it into a private copy) and a socket relayed to the item's own query channel, so a
run on one copy of the data cannot reach another copy. Runs take turns on a zygote (a second
one starts when a run finds the first busy with another run: `POOL`); after each, the zygote
kills every other process of the sandbox, removes SysV IPC objects and empties every writable
folder before it forks the next (`_zygote.py` says how). Limits are those of a fresh run: the
rlimits in the child, the cgroup's totals counted from the run's start, wall time, output and
disk watched by the host (`_process.watch`); what the zygote holds of the preloaded modules is
the harness's, not counted against a run's memory (in a fresh run a program that imports them
pays for them). A run the host stops for a limit takes the whole zygote with it; a dead or
wedged zygote is replaced, and a run whose zygote ended before reporting its end says so. The
zygote is started by a thread that lasts as long as the harness process
(`stores/common/lasting_start.py`): bwrap dies with the thread that starts it, and `warm`'s or
a trial's thread ends.

`forked_run` returns None when it cannot run the code (another backend, no writable cgroup, a
store that is a folder or too large, every zygote busy with other trials' runs for `_WAIT_S`,
or unable to start), and the caller runs it in a fresh sandbox as before. `warm` starts it in the
background when the analyst's first `run_python` runs. `BACKINTEL_ZYGOTE=0` turns it off.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pytest_backintel.sandbox._process import (
    JOIN_CGROUPS,
    OutputBuffer,
    RawRun,
    parse_status,
    to_result,
    watch,
)
from pytest_backintel.sandbox._shipped import isolated_env
from pytest_backintel.sandbox.backintel_store import QUERY_FD_ENV
from pytest_backintel.sandbox.base import WORKSPACE, ExecResult, SandboxError
from pytest_backintel.sandbox.cgroup import RunCgroup
from pytest_backintel.sandbox.limits import Limits
from pytest_backintel.sandbox.seed import SANDBOX_SEED
from pytest_backintel.sandbox.zygote_relay import ChannelRelay
from pytest_backintel.sandbox.zygote_runs import (
    DONE_S,
    RunCounters,
    ZygoteWorkspace,
    ended_first,
    leave_out_the_zygote,
)
from stores.common.lasting_start import start_lasting


@runtime_checkable
class ZygoteHost(Protocol):
    """The provider a zygote runs under (`BwrapProvider`)."""

    session_dir: Path
    cgroup_mode: bool

    def zygote_argv(self, limits: Limits, *, store_mb: int, spec: dict[str, Any]) -> list[str]: ...

    def _mount(self, store_mount: Path | None) -> Path | None: ...

    def _channel(self, channel: Path | None) -> Path | None: ...


__all__ = [
    "PRELOAD",
    "ZYGOTE_ENV",
    "Zygote",
    "ZygoteHost",
    "close_zygotes",
    "forked_run",
    "warm",
]

ZYGOTE_ENV = "BACKINTEL_ZYGOTE"
"""Set to 0 to run every Python evidence re-run in a fresh sandbox."""
PRELOAD = (
    *("json", "sqlite3", "backintel_store", "numpy", "polars", "pandas", "scipy.stats"),
    *("sklearn", "sklearn.linear_model", "sklearn.ensemble", "sklearn.tree", "sklearn.pipeline"),
    *("sklearn.preprocessing", "sklearn.model_selection", "sklearn.metrics"),
)
"""What the zygote imports once (a module that is not installed is skipped)."""
STORE_MB = 512
"""The largest store file a zygote run copies in; a larger one runs in a fresh sandbox."""
_START_S = 180.0
_PRELOAD_MB = 1024
"""Room the zygote has to preload in, beyond a run's memory limit."""
_WAIT_S = 5.0
"""The longest a run waits for a zygote (other runs, a start-up) before it runs fresh."""
POOL = 2
"""Zygotes per set of limits at most: a second starts when a run finds the first busy (two
trials at once on two cores), each serving one run at a time as the first does."""
_MADE = threading.Lock()
_MB = 1024 * 1024


class Zygote:
    """One zygote sandbox for one set of limits, started on first use, replaced when it dies."""

    def __init__(self, provider: ZygoteHost, limits: Limits) -> None:
        self.provider = provider
        self.limits = limits
        self.lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._cgroup: RunCgroup | None = None
        self._failures = 0
        self._folder = provider.session_dir / f"zygote-{id(self):x}"
        (self._folder / "workspace").mkdir(parents=True, exist_ok=True)

    @property
    def usable(self) -> bool:
        return self._failures < 2

    @property
    def up(self) -> bool:
        """Started and not ended (busy or not)."""
        proc = self._proc
        return proc is not None and proc.poll() is None

    def _start(self) -> None:
        group = RunCgroup.create(
            self.limits.max_processes + 16, self.limits.memory_mb + _PRELOAD_MB
        )
        if group is None:
            raise SandboxError("no writable cgroup for the zygote")
        host, inside = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        spec = {"preload": list(PRELOAD), "seed": SANDBOX_SEED, "control": inside.fileno()}
        argv = self.provider.zygote_argv(self.limits, store_mb=STORE_MB, spec=spec)
        files = [str(f) for f in group.procs_files]
        log = (self._folder / "stderr.txt").open("wb")
        try:  # bwrap dies with the thread that starts it: one that lasts (`start_lasting`)
            self._proc = start_lasting(
                lambda: subprocess.Popen(
                    ["/bin/sh", "-c", JOIN_CGROUPS, str(len(files)), *files, *argv],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                    pass_fds=(inside.fileno(),),
                    start_new_session=True,
                )
            )
        finally:
            inside.close()
            log.close()
        self._control, self._cgroup = host, group
        host.settimeout(_START_S)
        try:
            hello = json.loads(host.recv(1 << 16) or b"{}")
        except (OSError, ValueError) as exc:
            hello = {"problem": f"no answer ({exc})"}
        if not hello.get("ready"):
            why = hello.get("problem") or (self._folder / "stderr.txt").read_text()[-500:]
            self.kill()
            raise SandboxError(f"the zygote did not start: {why}")
        leave_out_the_zygote(group, self.limits)

    def kill(self) -> None:
        """End the zygote and everything in it; the next run starts a new one."""
        proc, group, control = self._proc, self._cgroup, self._control
        self._proc = self._cgroup = self._control = None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
        if group is not None:
            with contextlib.suppress(SandboxError):
                group.kill_all()
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        if group is not None:
            group.remove()
        if control is not None:
            control.close()

    def _ready(self) -> bool:
        if self._proc is not None and self._proc.poll() is None:
            return True
        self.kill()
        try:
            self._start()
        except (OSError, SandboxError):
            self._failures += 1
            return False
        return True

    def run(self, code: str, store: Path | None, channel: Path | None) -> ExecResult | None:
        """Run `code` in a child (over a copy of `store`, with the query channel whose folder
        is `channel`); None when the zygote cannot (nothing of the code ran then)."""
        for _ in range(2):
            if not self._ready():
                return None
            outcome = self._run_once(code, store, channel)
            if outcome is not None:
                return outcome
        return None

    def _run_once(self, code: str, store: Path | None, channel: Path | None) -> ExecResult | None:
        assert self._control is not None
        assert self._cgroup is not None
        assert self._proc is not None
        limits, proc = self.limits, self._proc
        pipes = [os.pipe() for _ in range(3)]
        code_fd = os.memfd_create("code")
        os.write(code_fd, code.encode("utf-8"))
        os.lseek(code_fd, 0, os.SEEK_SET)
        passed = [w for _, w in pipes] + [code_fd]
        if store is not None:
            passed.append(os.open(store, os.O_RDONLY | os.O_CLOEXEC))
        relay = ChannelRelay(channel) if channel is not None else None
        if relay is not None:  # handed over: closed below with the others, and only there
            passed.append(relay.inside.detach())
        env = isolated_env(limits, store, channel)
        if relay is not None:
            env[QUERY_FD_ENV] = "3"  # `_zygote.CHANNEL_FD`
        request = {
            "op": "run",
            "env": env,
            "rlimits": limits.rlimits(nproc=False),
            "store": store.name if store is not None else None,
            "query": relay is not None,
        }
        counters = RunCounters(self._cgroup)
        disk = ZygoteWorkspace(self._folder / "workspace", WORKSPACE, limits.disk_mb * _MB)
        disk.start(proc.pid)
        start = time.monotonic()
        try:
            socket.send_fds(self._control, [json.dumps(request).encode()], passed)
        except OSError:
            self.kill()
        finally:
            for fd in passed:
                os.close(fd)
            if relay is not None:
                relay.start()  # closed below, whether the request was sent or not
        (out, _), (err, _), (status_read, _) = pipes
        streams = {out: OutputBuffer(limits.max_output_bytes)}
        streams[err] = OutputBuffer(limits.max_output_bytes)
        killed_for, status_buf = watch(
            streams, status_read, limits, start=start, cgroup=counters, disk=disk
        )
        if disk.finish() and killed_for is None:
            killed_for = "disk"
        lost = ""
        if killed_for is None and b'"returncode"' not in status_buf:
            lost = ended_first(proc, self._folder / "stderr.txt")
        if killed_for is not None or not self._cleaned():
            self.kill()
        with contextlib.suppress(OSError):
            status_buf += os.read(status_read, 65536)
        for fd in (out, err, status_read):
            os.close(fd)
        if relay is not None:
            relay.close()
        if b'"started"' not in status_buf and killed_for is None:
            self.kill()
            return None
        stdout, stderr = streams.values()
        raw = RawRun(
            stdout=bytes(stdout.data),
            stderr=bytes(stderr.data),
            stdout_total=stdout.total,
            stderr_total=stderr.total,
            status=parse_status(bytes(status_buf)),
            killed_for=killed_for,
            exit_code=0,
            duration_s=time.monotonic() - start,
            pids_limit_hit=counters.limit_hit(),
            oom_killed=counters.oom_kills() > 0,
            note=lost,
        )
        return to_result(raw, limits)

    def _cleaned(self) -> bool:
        """Whether the zygote reports the sandbox clean again in time."""
        if self._control is None:  # the request could not be sent
            return False
        self._control.settimeout(DONE_S)
        try:
            return json.loads(self._control.recv(1 << 16) or b"{}").get("done") is True
        except (OSError, ValueError):
            return False


def _pool(provider: object, limits: Limits) -> list[Zygote]:
    """`provider`'s zygotes for `limits` (the first made on first use); empty where none."""
    if os.environ.get(ZYGOTE_ENV, "1") == "0" or not isinstance(provider, ZygoteHost):
        return []
    if not provider.cgroup_mode or os.uname().machine not in ("x86_64", "aarch64"):
        return []
    zygotes: dict[Limits, list[Zygote]] = provider.__dict__.setdefault("_zygotes", {})
    with _MADE:
        pool = zygotes.setdefault(limits, [])
        if not pool:
            pool.append(Zygote(provider, limits))
        return list(pool)


def _zygote(provider: object, limits: Limits) -> Zygote | None:
    """`provider`'s first zygote for `limits` (made on first use), or None where there is none."""
    pool = _pool(provider, limits)
    return pool[0] if pool and pool[0].usable else None


def _another(provider: ZygoteHost, limits: Limits) -> None:
    """Add a zygote for `limits`, started in the background, while the pool has room."""
    zygotes: dict[Limits, list[Zygote]] = provider.__dict__["_zygotes"]
    with _MADE:
        pool = zygotes[limits]
        if len(pool) >= POOL or not all(z.usable and z.up for z in pool):
            return  # full, or one is still starting (it serves a run soon)
        pool.append(Zygote(provider, limits))
    _start_in_background(pool[-1])


def _take(provider: ZygoteHost, limits: Limits) -> Zygote | None:
    """A usable zygote of the pool, locked for one run: a free one at once; while all are busy
    another is started (up to `POOL`) and the first to be free within `_WAIT_S` is taken."""
    deadline = time.monotonic() + _WAIT_S
    grown = False
    while True:
        pool = [z for z in _pool(provider, limits) if z.usable]
        for zygote in pool:
            if zygote.lock.acquire(blocking=False):
                return zygote
        if not pool or time.monotonic() >= deadline:
            return None
        if not grown:
            _another(provider, limits)
            grown = True
        time.sleep(0.02)


def warm(provider: object, limits: Limits) -> None:
    """Start `provider`'s zygote in the background (the analyst's first `run_python` says that
    Python evidence is likely to follow), so the first re-run need not wait for its start-up."""
    _start_in_background(_zygote(provider, limits))


def _start_in_background(zygote: Zygote | None) -> None:
    if zygote is not None and zygote.lock.acquire(blocking=False):

        def start() -> None:
            try:
                zygote._ready()
            finally:
                zygote.lock.release()

        threading.Thread(target=start, name="backintel-zygote-warm", daemon=True).start()


def forked_run(
    provider: object, store: Path | None, code: str, limits: Limits, channel: Path | None
) -> ExecResult | None:
    """`code` run by `provider`'s zygote for `limits`; None when it cannot (see the module)."""
    if _zygote(provider, limits) is None:
        return None
    assert isinstance(provider, ZygoteHost)
    store, channel = provider._mount(store), provider._channel(channel)
    if store is not None and (not store.is_file() or store.stat().st_size > STORE_MB * _MB):
        return None
    zygote = _take(provider, limits)
    if zygote is None:
        return None  # concurrent trials keep them busy: a fresh sandbox does not wait longer
    try:
        return zygote.run(code, store, channel)
    finally:
        zygote.lock.release()


def close_zygotes(provider: object) -> None:
    """End every zygote of `provider` (its session is over)."""
    for pool in getattr(provider, "_zygotes", {}).values():
        for zygote in pool:
            with zygote.lock:
                zygote.kill()
