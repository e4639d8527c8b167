"""Who owns an artefact on disk or on a server, and whether that owner is gone.

An owner is this host, its boot id, a pid and that process's start time (clock ticks since
boot, from `/proc/<pid>/stat`), so a pid reused after a crash or a reboot is not mistaken for
the owner. A folder records its owner in `OWNER_FILE`; a PostgreSQL database or role in its
comment (`comment()`). `is_gone` answers only for this host: an artefact of another host is
never judged gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["OWNER_FILE", "Owner", "mark_folder", "read_folder_owner"]

OWNER_FILE = ".backintel-owner.json"
TAG = "backintel"


def boot_id() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return ""


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None when it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


@dataclass(frozen=True)
class Owner:
    host: str
    boot: str
    pid: int
    start: int | None

    @classmethod
    def current(cls) -> Owner:
        pid = os.getpid()
        return cls(socket.gethostname(), boot_id(), pid, start_ticks(pid))

    def is_gone(self) -> bool:
        """True when this host's owner process no longer runs (or the host was rebooted)."""
        if self.host != socket.gethostname():
            return False
        if self.boot and boot_id() and self.boot != boot_id():
            return True
        running = start_ticks(self.pid)
        if running is None:
            return True
        return self.start is not None and running != self.start

    def comment(self, token: str) -> str:
        """`backintel:<host>:<boot id>:<pid>:<start>:<token>`, for a database or role comment;
        `token` tells apart several stores of one process."""
        return f"{TAG}:{self.host}:{self.boot}:{self.pid}:{self.start or 0}:{token}"

    @classmethod
    def from_comment(cls, text: str | None) -> Owner | None:
        """The owner in a comment, also the older `backintel:<host>:<pid>:<token>` form."""
        parts = str(text or "").split(":")
        if not parts or parts[0] != TAG:
            return None
        with contextlib.suppress(ValueError):
            if len(parts) == 6:
                return cls(parts[1], parts[2], int(parts[3]), int(parts[4]) or None)
            if len(parts) == 4:
                return cls(parts[1], "", int(parts[2]), None)
        return None


def mark_folder(folder: Path) -> None:
    """Record the current process as the owner of `folder` (created if missing), replacing
    any earlier marker: a pid reused after a crash must not inherit a dead owner."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / OWNER_FILE).write_text(json.dumps(asdict(Owner.current())))


def read_folder_owner(folder: Path) -> Owner | None:
    """The owner recorded in `folder`, or None when there is no readable marker."""
    try:
        data = json.loads((folder / OWNER_FILE).read_text())
        return Owner(str(data["host"]), str(data["boot"]), int(data["pid"]), data.get("start"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
