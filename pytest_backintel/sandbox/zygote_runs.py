"""A zygote as one run forked from it sees it (`zygote.py`): its cgroup's counters from the
run's start, its tmpfs watched for the disk limit, its caps (a run's limits plus what the zygote
itself holds once it has preloaded), and the note of a run whose zygote ended first."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

from pytest_backintel.sandbox.cgroup import RunCgroup
from pytest_backintel.sandbox.limits import Limits
from pytest_backintel.sandbox.workspace_tmpfs import TmpfsWorkspace

__all__ = ["DONE_S", "RunCounters", "ZygoteWorkspace", "ended_first", "leave_out_the_zygote"]

_MB = 1024 * 1024
DONE_S = 10.0
"""How long a zygote is given to report a run's end (clean again), or to end once it failed to."""


class RunCounters(RunCgroup):
    """The zygote's cgroup as one run sees it: counters from the run's start."""

    def __init__(self, group: RunCgroup) -> None:
        super().__init__(group.paths, group.version)
        self._oom, self._cpu = group.oom_kills(), group.cpu_s() or 0.0
        self._refused = group.forks_refused()

    def oom_kills(self) -> int:
        return super().oom_kills() - self._oom

    def cpu_s(self) -> float | None:
        total = super().cpu_s()
        return None if total is None else total - self._cpu

    def limit_hit(self) -> bool:
        return self.forks_refused() > self._refused


class ZygoteWorkspace(TmpfsWorkspace):
    """The zygote's tmpfs workspace: watched for the disk limit, never copied back."""

    def finish(self) -> bool:
        return self.over()


def leave_out_the_zygote(group: RunCgroup, limits: Limits) -> None:
    """Cap the cgroup at a run's limits plus what the zygote holds once it has preloaded (its
    memory and its threads are the harness's): as a fresh run, whose tree starts with bwrap,
    its init and the launcher, which the zygote stands for."""
    memory = group.paths.get("memory")
    name = "memory.current" if group.version == 2 else "memory.usage_in_bytes"
    resident = 0
    with contextlib.suppress(OSError, ValueError):
        if memory is not None:
            resident = -(-int((memory / name).read_text()) // _MB)
    group._limit_memory(limits.memory_mb + resident)
    pids = group.paths["pids"]
    with contextlib.suppress(OSError, ValueError):
        tasks = int((pids / "pids.current").read_text())
        (pids / "pids.max").write_text(str(limits.max_processes + max(0, tasks - 3)))


def ended_first(proc: subprocess.Popen[bytes], log: Path) -> str:
    """The note of a run whose zygote ended before it reported the run's end: bwrap's exit
    status and the last line the zygote wrote (a traceback's), so the record says it."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=DONE_S)
    last = ""
    with contextlib.suppress(OSError, IndexError):
        last = "; its last line: " + log.read_text(errors="replace").splitlines()[-1][-300:]
    rc = proc.returncode
    status = f"bwrap exit status {rc}" if rc is not None and rc >= 0 else "bwrap still running"
    status = f"bwrap killed by signal {-rc}" if rc is not None and rc < 0 else status
    return f"\n[sandbox: the zygote this run was forked from ended first ({status}){last}]\n"
