"""Resource limits of one sandbox execution and how a breach is recognised afterwards.

Every backend enforces the same `Limits`: rlimits applied by the launcher to each process (CPU,
data segment, address space, file size, open files, and processes where no cgroup exists), a
wall-clock timer and an output cap kept by the host, totals for the whole process tree
(processes, resident memory and CPU time through a cgroup, or the engine's limits) and the disk
the run fills (a size-limited tmpfs on bwrap, watched by the host elsewhere). `classify` turns
what was observed into one `LimitHit` name.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

__all__ = ["LIMIT_NAMES", "HostKill", "LimitHit", "Limits", "Observed", "classify"]

LimitHit = Literal["wall_time", "cpu_time", "memory", "processes", "file_size", "disk", "output"]
LIMIT_NAMES: tuple[LimitHit, ...] = (
    "wall_time",
    "cpu_time",
    "memory",
    "processes",
    "file_size",
    "disk",
    "output",
)
HostKill = Literal["wall_time", "output", "memory", "cpu_time", "disk"]
"""The limits at which the host itself kills the whole tree."""

_MB = 1024 * 1024

_MEMORY_PATTERNS = re.compile(
    r"MemoryError|memory allocation of \d+ bytes failed|std::bad_alloc|Out of Memory Error"
    r"|Cannot allocate memory|OpenBLAS error: Memory allocation"
)
_FORK_PATTERNS = re.compile(r"BlockingIOError: \[Errno 11\]|could not spawn threads|fork: retry")
_FSIZE_PATTERNS = re.compile(r"\[Errno 27\] File too large")
_NOSPACE_PATTERNS = re.compile(r"No space left on device")

SIGKILL = 9
SIGXCPU = 24
SIGXFSZ = 25


@dataclass(frozen=True)
class Limits:
    """What one execution may use. Defaults suit an analyst's `run_python`; tests shrink them."""

    wall_time_s: float = 60.0
    """Wall-clock seconds before the whole process tree is killed."""
    cpu_time_s: int = 60
    """CPU seconds per process (RLIMIT_CPU: SIGXCPU at the limit, SIGKILL one second later)
    and of the whole tree in total (counted by the cgroup; the host kills the tree)."""
    memory_mb: int = 2048
    """Heap and private writable memory per process (RLIMIT_DATA; allocation beyond it fails),
    and everything the whole tree holds resident in total (the cgroup's memory limit)."""
    address_space_headroom_mb: int = 2048
    """RLIMIT_AS is memory_mb plus this: bounds shared mappings that RLIMIT_DATA does not count
    while leaving room for the virtual reservations of polars, duckdb and thread stacks."""
    max_processes: int = 64
    """Processes and threads at once (pids cgroup, else RLIMIT_NPROC)."""
    max_file_size_mb: int = 256
    """The largest file the payload may write (RLIMIT_FSIZE)."""
    disk_mb: int = 1024
    """All the files the workspace may hold at once: on bwrap the size of its tmpfs (a write
    past it fails with ENOSPC; the pages count as memory), elsewhere watched by the host, which
    kills the tree once a run grows the workspace past it."""
    max_open_files: int = 256
    """RLIMIT_NOFILE."""
    max_output_bytes: int = 64 * 1024
    """Bytes of stdout and of stderr kept; beyond that the stream is marked truncated."""
    output_kill_bytes: int = 8 * _MB
    """Total output after which the run is killed and reported as limit_hit='output'."""
    tmp_size_mb: int = 64
    """Size of the private /tmp tmpfs (bwrap) or tmpfs mount (docker)."""
    threads: int = 2
    """Thread pools of polars, duckdb and BLAS are sized to this (they count as processes)."""

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value <= 0:
                raise ValueError(f"Limits.{name} must be positive, got {value!r}")
        if self.output_kill_bytes < self.max_output_bytes:
            raise ValueError(
                f"Limits.output_kill_bytes ({self.output_kill_bytes}) must be at least "
                f"max_output_bytes ({self.max_output_bytes})"
            )

    def with_(self, **changes: Any) -> Limits:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    def rlimits(self, *, nproc: bool) -> dict[str, list[int]]:
        """The rlimits the launcher applies, as `resource` names -> [soft, hard]."""
        data = self.memory_mb * _MB
        space = (self.memory_mb + self.address_space_headroom_mb) * _MB
        fsize = self.max_file_size_mb * _MB
        limits = {
            "RLIMIT_CPU": [self.cpu_time_s, self.cpu_time_s + 1],
            "RLIMIT_DATA": [data, data],
            "RLIMIT_AS": [space, space],
            "RLIMIT_FSIZE": [fsize, fsize],
            "RLIMIT_NOFILE": [self.max_open_files, self.max_open_files],
            "RLIMIT_CORE": [0, 0],
        }
        if nproc:
            limits["RLIMIT_NPROC"] = [self.max_processes, self.max_processes]
        return limits

    def describe(self, hit: LimitHit) -> str:
        """The limit `hit` as the record and the analyst read it."""
        text = {
            "wall_time": f"{self.wall_time_s:g} s of wall time",
            "cpu_time": f"{self.cpu_time_s} CPU seconds (per process and in total)",
            "memory": f"{self.memory_mb} MB of memory (per process and in total)",
            "processes": f"{self.max_processes} processes and threads at once",
            "file_size": f"{self.max_file_size_mb} MB per file",
            "disk": f"{self.disk_mb} MB of files in the workspace in total",
            "output": f"{self.output_kill_bytes} bytes of output",
        }
        return text[hit]

    def thread_env(self) -> dict[str, str]:
        """Environment that sizes the thread pools of the data libraries."""
        n = str(self.threads)
        return {
            "POLARS_MAX_THREADS": n,
            "RAYON_NUM_THREADS": n,
            "BACKINTEL_THREADS": n,
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "ARROW_IO_THREADS": "1",
            "OMP_THREAD_LIMIT": "1",
        }


@dataclass(frozen=True)
class Observed:
    """What the host saw of one run, the input of `classify`."""

    killed_for: HostKill | None
    returncode: int | None
    """The payload's return code (negative signal number), None when it never reported."""
    signal: int | None
    cpu_s: float | None
    pids_limit_hit: bool
    oom_killed: bool
    stderr_tail: str


def classify(obs: Observed, limits: Limits) -> LimitHit | None:
    """The limit that ended or broke the run, or None.

    The host's own kills come first (they are certain), then the signals rlimits send, then the
    process counter, then the error messages a payload prints when an allocation, a fork or a
    write is refused (only when the payload failed: a handled MemoryError is not a limit hit).
    """
    if obs.killed_for in ("wall_time", "cpu_time") and obs.pids_limit_hit:
        return "processes"  # a contained fork bomb retrying until a timer or the CPU total
    if obs.killed_for is not None:
        return obs.killed_for
    if obs.signal == SIGXCPU or (
        obs.signal == SIGKILL and obs.cpu_s is not None and obs.cpu_s >= limits.cpu_time_s - 0.05
    ):
        return "cpu_time"
    if obs.oom_killed:
        return "memory"
    if obs.signal == SIGXFSZ:
        return "file_size"
    if obs.pids_limit_hit:
        return "processes"
    if obs.returncode == 0:
        return None
    tail = obs.stderr_tail
    if _MEMORY_PATTERNS.search(tail):
        return "memory"
    if _FORK_PATTERNS.search(tail):
        return "processes"
    if _FSIZE_PATTERNS.search(tail):
        return "file_size"
    if _NOSPACE_PATTERNS.search(tail):  # a full tmpfs (/tmp, /dev/shm, the bwrap workspace)
        return "disk"
    return None
