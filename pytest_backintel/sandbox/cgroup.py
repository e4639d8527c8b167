"""A cgroup per sandbox run: processes, memory and CPU time of the whole process tree, in total.

Where this machine offers writable cgroups (root, cgroup v1 `pids`/`memory`/`cpuacct`
hierarchies, or a v2 root with those controllers enabled), each execution gets a leaf
`backintel/<owner pid>-<token>` in every hierarchy: `pids.max` caps processes and threads,
the memory limit caps everything the tree holds resident (tmpfs pages included, no swap), and
the CPU counter lets the host stop the tree at its total CPU budget. The host kills every member
through it. Leaves whose owner process is gone are swept (`sweep_stale`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from pathlib import Path

from pytest_backintel.sandbox.base import SandboxError

__all__ = ["RunCgroup"]

_V1 = Path("/sys/fs/cgroup")
_V2_ROOT = Path("/sys/fs/cgroup")
_CONTROLLERS = ("pids", "memory", "cpuacct")
_V2_NAMES = {"pids": "pids", "memory": "memory", "cpuacct": "cpu"}
_MB = 1024 * 1024


def _v2_enabled() -> set[str]:
    with contextlib.suppress(OSError):
        if os.access(_V2_ROOT, os.W_OK):
            return set((_V2_ROOT / "cgroup.subtree_control").read_text().split())
    return set()


def _read_key(path: Path, key: str) -> int:
    """The value of `key` in a flat-keyed cgroup file (0 when absent or unreadable)."""
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return 0


class RunCgroup:
    """The leaf cgroups of one run, one per controller (a single one on cgroup v2)."""

    def __init__(self, paths: dict[str, Path], version: int) -> None:
        self.paths = paths
        """Controller name (`pids`, `memory`, `cpuacct`) -> its leaf folder."""
        self.version = version

    @staticmethod
    def bases() -> dict[str, Path]:
        """The writable hierarchy of each controller this machine offers (empty: none)."""
        found = {}
        for name in _CONTROLLERS:
            root = _V1 / name
            if (root / "cgroup.procs").exists() and os.access(root, os.W_OK):
                found[name] = root
        if found:
            return found
        enabled = _v2_enabled()
        return {name: _V2_ROOT for name in _CONTROLLERS if _V2_NAMES[name] in enabled}

    @classmethod
    def base(cls) -> Path | None:
        """The writable pids hierarchy (the one that confines the tree), or None."""
        return cls.bases().get("pids")

    @classmethod
    def create(cls, max_pids: int, memory_mb: int) -> RunCgroup | None:
        """Leaves capped at `max_pids` processes and `memory_mb` resident in total, or None
        when no pids hierarchy is writable here."""
        bases = cls.bases()
        if "pids" not in bases:
            return None
        version = 2 if bases["pids"] == _V2_ROOT else 1
        leaf = f"{os.getpid()}-{secrets.token_hex(4)}"
        paths: dict[str, Path] = {}
        group = cls(paths, version)
        try:
            if version == 2:
                parent = _V2_ROOT / "backintel"
                parent.mkdir(exist_ok=True)
                wanted = " ".join(f"+{_V2_NAMES[n]}" for n in bases)
                with contextlib.suppress(OSError):
                    (parent / "cgroup.subtree_control").write_text(wanted)
                (parent / leaf).mkdir()
                paths.update({name: parent / leaf for name in bases})
            else:
                for name, root in bases.items():
                    (root / "backintel" / leaf).mkdir(parents=True)
                    paths[name] = root / "backintel" / leaf
            (paths["pids"] / "pids.max").write_text(str(max_pids))
        except OSError:
            group.remove()
            return None
        group._limit_memory(memory_mb)
        return group

    def _limit_memory(self, memory_mb: int) -> None:
        """Set the memory cap; a hierarchy that refuses it is dropped (the run goes on with the
        per-process rlimits only, and `memory_capped` says so)."""
        path = self.paths.get("memory")
        if path is None:
            return
        limit = str(memory_mb * _MB)
        try:
            if self.version == 2:
                (path / "memory.max").write_text(limit)
                with contextlib.suppress(OSError):
                    (path / "memory.swap.max").write_text("0")
            else:
                (path / "memory.limit_in_bytes").write_text(limit)
                with contextlib.suppress(OSError):  # absent without swap accounting
                    (path / "memory.memsw.limit_in_bytes").write_text(limit)
        except OSError:
            if self.version == 1:
                self._remove_one(path)
            del self.paths["memory"]

    @property
    def memory_capped(self) -> bool:
        return "memory" in self.paths

    @property
    def procs_files(self) -> list[Path]:
        """Every distinct `cgroup.procs` a run joins (one per hierarchy)."""
        return sorted({p / "cgroup.procs" for p in self.paths.values()})

    def limit_hit(self) -> bool:
        """Whether a fork was refused at `pids.max`."""
        return self.forks_refused() > 0

    def forks_refused(self) -> int:
        """How many forks were refused at `pids.max`."""
        return _read_key(self.paths["pids"] / "pids.events", "max")

    def oom_kills(self) -> int:
        """Processes the kernel killed at the memory cap."""
        path = self.paths.get("memory")
        if path is None:
            return 0
        if self.version == 2:
            return _read_key(path / "memory.events", "oom_kill")
        return _read_key(path / "memory.oom_control", "oom_kill")

    def cpu_s(self) -> float | None:
        """CPU seconds used by the whole tree so far, or None without a CPU counter."""
        path = self.paths.get("cpuacct")
        if path is None:
            return None
        if self.version == 2:
            return _read_key(path / "cpu.stat", "usage_usec") / 1e6
        with contextlib.suppress(OSError, ValueError):
            return int((path / "cpuacct.usage").read_text()) / 1e9
        return None

    def peak_memory_mb(self) -> float | None:
        path = self.paths.get("memory")
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        if path is None:
            return None
        with contextlib.suppress(OSError, ValueError):
            return round(int((path / name).read_text()) / _MB, 1)
        return None

    def members(self) -> list[int]:
        found: set[int] = set()
        for procs in self.procs_files:
            with contextlib.suppress(OSError, ValueError):
                found.update(int(p) for p in procs.read_text().split())
        return sorted(found)

    def kill_all(self) -> None:
        for _ in range(200):
            pids = self.members()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)
        raise SandboxError(f"processes survive in {self.paths} after SIGKILL: {self.members()}")

    @staticmethod
    def _remove_one(path: Path) -> None:
        for _ in range(100):
            try:
                path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)  # members are still being reaped

    def remove(self) -> None:
        for path in sorted(set(self.paths.values())):
            self._remove_one(path)

    @classmethod
    def sweep_stale(cls) -> list[Path]:
        """Remove the leaves (`<owner pid>-<token>`) of harness processes that no longer exist,
        killing any payload left inside first; the leaves removed. Leaves of live processes
        (other sessions on this machine) are left alone."""
        removed = []
        for name, root in cls.bases().items():
            parent = root / "backintel"
            if not parent.is_dir():
                continue
            for leaf in sorted(parent.iterdir()):
                owner = leaf.name.partition("-")[0]
                if leaf.is_dir() and owner.isdigit() and not Path(f"/proc/{owner}").exists():
                    group = cls({name: leaf}, 1)
                    with contextlib.suppress(OSError, SandboxError):
                        group.kill_all()
                    group.remove()
                    if not leaf.exists():
                        removed.append(leaf)
        return removed

    @classmethod
    def usable(cls) -> bool:
        """Whether runs here can be confined in a cgroup; removes stale leaves first."""
        cls.sweep_stale()
        return cls.base() is not None
