"""The disk a run may fill: the bytes held under its writable host folders, watched in total.

RLIMIT_FSIZE caps one file; this caps them all. The host walks the writable folders while the
payload runs (no symlinks followed, each file counted by its allocated blocks and at least one
4 KiB block, so a flood of empty files counts too) and the run is killed once they hold more
than the limit and more than when the run began. Overshoot is bounded by what the payload can
write between two walks (`interval`). The bwrap backend holds the workspace in a size-limited
tmpfs instead (`workspace_tmpfs.py`), a hard bound; this watch serves subprocess and docker.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["DiskWatch", "disk_usage"]

_MIN_ENTRY = 4096
_MIN_INTERVAL_S = 0.02


def disk_usage(roots: Sequence[Path]) -> int:
    """Bytes held under `roots`: allocated blocks, at least 4 KiB per entry; links not followed."""
    total = 0
    stack = [str(r) for r in roots]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += max(st.st_blocks * 512, _MIN_ENTRY)
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return total


class DiskWatch:
    """Polls `disk_usage(roots)` against `limit_bytes` at most every `interval` seconds."""

    def __init__(self, roots: Sequence[Path], limit_bytes: int) -> None:
        self.roots = list(roots)
        self.limit_bytes = limit_bytes
        self.start_bytes = disk_usage(self.roots)
        self.peak_bytes = self.start_bytes
        self.interval = _MIN_INTERVAL_S
        self._next = time.monotonic() + self.interval

    def start(self, pid: int) -> None:
        """The run has started (the watch needs nothing of it)."""

    def finish(self) -> bool:
        """The run has ended; the watch's verdicts were all given while it ran."""
        return False

    def over(self) -> bool:
        """Whether the folders now hold more than the limit (and more than at the start)."""
        now = time.monotonic()
        if now < self._next:
            return False
        used = disk_usage(self.roots)
        spent = time.monotonic() - now
        self.interval = max(_MIN_INTERVAL_S, 4 * spent)  # a walk never takes over the CPU
        self._next = time.monotonic() + self.interval
        self.peak_bytes = max(self.peak_bytes, used)
        return used > self.limit_bytes and used > self.start_bytes
