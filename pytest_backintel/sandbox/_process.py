"""Host side of one run: start the launcher, feed code, read capped output, kill on limits.

`run_launcher` is shared by the bwrap and subprocess backends. The process tree is confined by a
cgroup when this machine offers a writable one (`RunCgroup.create`), which caps processes and
memory in total, counts the tree's CPU time and lets the host kill every member; otherwise
RLIMIT_NPROC stands in. The host also watches the disk the run fills (`DiskWatch`), or, for a
tmpfs workspace, notices it full and copies it back before the tree is killed (`TmpfsWorkspace`).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_backintel.sandbox.base import ExecResult, SandboxError
from pytest_backintel.sandbox.cgroup import RunCgroup
from pytest_backintel.sandbox.disk import DiskWatch
from pytest_backintel.sandbox.limits import HostKill, Limits, Observed, classify
from pytest_backintel.sandbox.workspace_tmpfs import TmpfsWorkspace

__all__ = [
    "JOIN_CGROUPS",
    "OutputBuffer",
    "RawRun",
    "parse_status",
    "run_confined",
    "run_launcher",
    "to_result",
    "truncate_marker",
    "watch",
]

_GRACE_S = 0.5
"""How long output is still collected after the launcher reported the payload's end."""
JOIN_CGROUPS = (
    'n=$0; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n - 1)); done; '
    'exec "$@"'
)
"""Shell that writes its pid into each cgroup.procs file given, then execs the rest."""
_POLL_S = 0.02
"""How often the host checks the tree's memory, CPU and disk while it runs."""


def truncate_marker(kept: int, total: int) -> str:
    return f"\n[... output truncated: {total - kept} more bytes not shown, limit {kept} bytes]\n"


@dataclass
class RawRun:
    stdout: bytes
    stderr: bytes
    stdout_total: int
    stderr_total: int
    status: dict[str, Any] | None
    killed_for: HostKill | None
    exit_code: int
    duration_s: float
    pids_limit_hit: bool
    oom_killed: bool = False
    launcher_started: bool = True
    """False when the launcher never ran: the sandbox itself failed to start."""
    workspace_lost: bool = False
    """True when a tmpfs workspace could not be copied back (nothing left inside to reach)."""
    note: str = ""
    """The sandbox's own words on how the run ended, added to its stderr."""


class OutputBuffer:
    """Keeps the first `keep` bytes of a stream and counts all of them."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.data = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.keep - len(self.data)
        if room > 0:
            self.data += chunk[:room]


def run_launcher(
    argv: Sequence[str],
    *,
    code: str | None,
    limits: Limits,
    env: dict[str, str] | None,
    cwd: Path | None,
    status_fd: int,
    status_read: int,
    cgroup: RunCgroup | None,
    disk: DiskWatch | TmpfsWorkspace | None = None,
) -> RawRun:
    """Run `argv` (which starts the launcher) to completion or until a limit, capturing output.

    `status_fd` is the write end of the launcher's status pipe (passed to the child), and
    `status_read` its read end; both are closed here.
    """
    cmd = list(argv)
    if cgroup is not None:  # join the cgroups before exec so every descendant is inside them
        files = [str(f) for f in cgroup.procs_files]
        cmd = ["/bin/sh", "-c", JOIN_CGROUPS, str(len(files)), *files, *argv]
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            pass_fds=(status_fd,),
            start_new_session=True,
        )
    except OSError as exc:
        os.close(status_fd)
        os.close(status_read)
        raise SandboxError(f"cannot start the sandbox ({cmd[0]}): {exc}") from exc
    os.close(status_fd)
    if disk is not None:
        disk.start(proc.pid)
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    streams = {proc.stdout.fileno(): OutputBuffer(limits.max_output_bytes)}
    streams[proc.stderr.fileno()] = OutputBuffer(limits.max_output_bytes)
    stdin = proc.stdin

    def kill() -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if cgroup is not None:
            cgroup.kill_all()

    killed_for, status_buf = watch(
        streams,
        status_read,
        limits,
        start=start,
        cgroup=cgroup,
        disk=disk,
        stdin=(stdin.fileno(), (code or "").encode("utf-8"), stdin.close),
    )
    if disk is not None and disk.finish() and killed_for is None:
        killed_for = "disk"  # a tmpfs workspace found full once the payload had ended
    kill()  # whatever is left of the tree: a timed-out payload, or daemons it left behind
    if not proc.stdin.closed:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    try:
        exit_code = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        kill()
        exit_code = proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    with contextlib.suppress(OSError):
        status_buf += os.read(status_read, 65536)
    os.close(status_read)
    status = parse_status(bytes(status_buf))
    started = b'"started"' in status_buf
    out, err = streams.values()
    return RawRun(
        stdout=bytes(out.data),
        stderr=bytes(err.data),
        stdout_total=out.total,
        stderr_total=err.total,
        status=status,
        killed_for=killed_for,
        exit_code=exit_code,
        duration_s=time.monotonic() - start,
        pids_limit_hit=cgroup.limit_hit() if cgroup is not None else False,
        oom_killed=cgroup.oom_kills() > 0 if cgroup is not None else False,
        launcher_started=started,
        workspace_lost=isinstance(disk, TmpfsWorkspace) and disk.lost,
    )


def watch(
    streams: dict[int, OutputBuffer],
    status_read: int,
    limits: Limits,
    *,
    start: float,
    cgroup: RunCgroup | None,
    disk: DiskWatch | TmpfsWorkspace | None,
    stdin: tuple[int, bytes, Callable[[], None]] | None = None,
) -> tuple[HostKill | None, bytearray]:
    """Collect a run's output (`streams`: fd -> buffer) and its launcher's status until they
    close, a limit is met (the host kill's name is returned) or the payload ended and its
    output had `_GRACE_S` to arrive; `stdin`: (fd, bytes to write, closer) when there is one."""
    status_buf = bytearray()
    sel = selectors.DefaultSelector()
    for fd in (*streams, status_read):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    pending = b""
    if stdin is not None:
        stdin_fd, pending, close_stdin = stdin
        os.set_blocking(stdin_fd, False)
        sel.register(stdin_fd, selectors.EVENT_WRITE)
    open_fds = {*streams, status_read}
    deadline = start + limits.wall_time_s
    killed_for: HostKill | None = None
    grace = False
    while open_fds:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            killed_for = None if grace else "wall_time"
            break
        for key, _ in sel.select(timeout=min(remaining, _POLL_S)):
            fd = int(key.fd)
            if stdin is not None and fd == stdin_fd:
                try:
                    sent = os.write(fd, pending[:65536])
                    pending = pending[sent:]
                except (BrokenPipeError, BlockingIOError) as exc:
                    if isinstance(exc, BrokenPipeError):
                        pending = b""
                if not pending:
                    sel.unregister(fd)
                    close_stdin()
                continue
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                sel.unregister(fd)
                open_fds.discard(fd)
            elif fd == status_read:
                status_buf += chunk
                if b"returncode" in status_buf:  # the payload ended: collect the rest, briefly
                    deadline = min(deadline, time.monotonic() + _GRACE_S)
                    grace = True
            else:
                streams[fd].feed(chunk)
        if b'"held"' in status_buf:  # nothing inside can write any more: take what is left
            _drain(streams)
            break
        if sum(s.total for s in streams.values()) > limits.output_kill_bytes:
            killed_for = "output"
            break
        if (over := _over_a_total(cgroup, disk, limits)) is not None:
            killed_for = over
            break
    sel.close()
    return killed_for, status_buf


def run_confined(
    argv: Sequence[str],
    *,
    code: str | None,
    limits: Limits,
    env: dict[str, str] | None,
    cwd: Path | None,
    status_fd: int,
    status_read: int,
    cgroup_mode: bool,
    writable: Sequence[Path] = (),
    tmpfs_workspace: tuple[Path, str] | None = None,
) -> ExecResult:
    """`run_launcher` in a fresh cgroup (when `cgroup_mode`, killed and removed after), with
    the host folders in `writable` watched for the disk limit, or a tmpfs workspace (its host
    folder and its path inside) copied back; the raw run as an `ExecResult`."""
    cgroup = RunCgroup.create(limits.max_processes, limits.memory_mb) if cgroup_mode else None
    disk_bytes = limits.disk_mb * 1024 * 1024
    disk: DiskWatch | TmpfsWorkspace | None = None
    if tmpfs_workspace is not None:
        disk = TmpfsWorkspace(*tmpfs_workspace, disk_bytes)
    elif writable:
        disk = DiskWatch(writable, disk_bytes)
    try:
        raw = run_launcher(
            argv,
            code=code,
            limits=limits,
            env=env,
            cwd=cwd,
            status_fd=status_fd,
            status_read=status_read,
            cgroup=cgroup,
            disk=disk,
        )
    finally:
        if cgroup is not None:
            cgroup.kill_all()
            cgroup.remove()
    return to_result(raw, limits)


def _over_a_total(
    cgroup: RunCgroup | None, disk: DiskWatch | TmpfsWorkspace | None, limits: Limits
) -> HostKill | None:
    """The total the tree has gone past (memory, CPU time, disk), or None."""
    if cgroup is not None:
        if cgroup.oom_kills() > 0:
            return "memory"
        cpu = cgroup.cpu_s()
        if cpu is not None and cpu > limits.cpu_time_s:
            return "cpu_time"
    if disk is not None and disk.over():
        return "disk"
    return None


def _drain(streams: dict[int, OutputBuffer]) -> None:
    """Read what the pipes still hold, without waiting for their writers to close them."""
    for fd, buffer in streams.items():
        with contextlib.suppress(BlockingIOError, OSError):
            while chunk := os.read(fd, 65536):
                buffer.feed(chunk)


def parse_status(data: bytes) -> dict[str, Any] | None:
    for line in reversed(data.decode("utf-8", "replace").splitlines()):
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and "returncode" in record:
                return record
    return None


def to_result(raw: RawRun, limits: Limits) -> ExecResult:
    """Turn a raw run into the `ExecResult` the caller sees, classifying any limit hit.

    A launcher that never started is the sandbox failing (`SandboxError`); one that started but
    never reported is a payload failure (the payload may have killed it).
    """
    status = raw.status or {}
    returncode = status.get("returncode")
    note = raw.note
    if raw.status is None and raw.killed_for is None:
        if not raw.launcher_started:
            text = raw.stderr.decode("utf-8", "replace")[-2000:]
            raise SandboxError(f"the sandbox could not start (exit {raw.exit_code}): {text}")
        returncode = raw.exit_code if raw.exit_code != 0 else -signal.SIGKILL
        note += "\n[sandbox: the payload ended without the launcher's report]\n"
    if raw.workspace_lost:
        note += "\n[sandbox: the files this run wrote were lost; earlier runs' files are kept]\n"
    stdout = raw.stdout.decode("utf-8", "replace")
    stderr = raw.stderr.decode("utf-8", "replace") + note
    if raw.stdout_total > len(raw.stdout):
        stdout += truncate_marker(len(raw.stdout), raw.stdout_total)
    if raw.stderr_total > len(raw.stderr):
        stderr += truncate_marker(len(raw.stderr), raw.stderr_total)
    observed = Observed(
        killed_for=raw.killed_for,
        returncode=returncode,
        signal=status.get("signal"),
        cpu_s=status.get("cpu_s"),
        pids_limit_hit=raw.pids_limit_hit,
        oom_killed=raw.oom_killed,
        stderr_tail=stderr[-4000:],
    )
    if returncode is None:
        returncode = -signal.SIGKILL
    hit = classify(observed, limits)
    return ExecResult(
        returncode=int(returncode),
        stdout=stdout,
        stderr=stderr,
        stdout_truncated=raw.stdout_total > len(raw.stdout),
        stderr_truncated=raw.stderr_total > len(raw.stderr),
        limit_hit=hit,
        duration_s=round(raw.duration_s, 4),
        limit=None if hit is None else limits.describe(hit),
    )
