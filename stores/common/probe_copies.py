"""The perturbed copies a probe writes of a source (`data/perturbed/<name>`, one folder per
dataset, form, salt and state of the source): whether the disk has room for one, and the
eviction of the copies of earlier states.

A copy's folder name starts with its family (`<dataset>-<form>-views-`) and ends with the
source's data hash; between them come the harness's version marks and `s<salt>`. Every use of
a copy marks it used (its `perturbed.json`'s time); after each use the copies of the family
for other states than the current one are evicted, all but the `KEPT_STATES` used last (a run
still going on the previous state keeps its copy). A folder is removed only under its build
lock (never one under way) and renamed away first, so a worker sees a whole copy or none.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
from pathlib import Path

from filelock import FileLock, Timeout

from stores.common.view_plan import DONE_FILE

__all__ = ["COPY_ROOM", "KEPT_STATES", "has_room", "keep_current"]

COPY_ROOM = 3
"""A probe's copy is written only while the cache's disk has this many times the source's
size free; else its sessions stay on the views."""
KEPT_STATES = 1
"""States of a source other than the current one whose copies are kept (the ones used last)."""

_SALT = re.compile(r"(?:^|-)s\d+(?=-)")


def has_room(cache_dir: Path, source_bytes: int) -> bool:
    """Whether the disk under `cache_dir` has `COPY_ROOM` times `source_bytes` free."""
    room = next(p for p in (cache_dir, *cache_dir.parents) if p.exists())
    return shutil.disk_usage(room).free > COPY_ROOM * source_bytes


def _state(name: str, family: str) -> str:
    """What names the source's state in a copy's folder name: all after the family but the
    salt (the copies of one state for several salts are all current)."""
    return _SALT.sub("", name[len(family) :])


def _last_used(folder: Path) -> float:
    with contextlib.suppress(OSError):
        return (folder / DONE_FILE).stat().st_mtime
    return 0.0


def _evict(folder: Path) -> bool:
    """Remove `folder` unless someone holds its build lock; whether it is gone."""
    try:
        with FileLock(str(folder) + ".lock", timeout=0):
            gone = folder.with_name(f".{folder.name}.tmp-evicted")
            shutil.rmtree(gone, ignore_errors=True)
            folder.rename(gone)  # a worker opening it now finds it whole or not at all
            shutil.rmtree(gone, ignore_errors=True)
    except (Timeout, OSError):
        return False
    return True


def keep_current(cache_dir: Path, final: Path, family: str) -> list[Path]:
    """Mark the copy `final` (of `family`) used now and evict the copies of the family for
    other states but the `KEPT_STATES` used last; the folders removed."""
    with contextlib.suppress(OSError):
        os.utime(final / DONE_FILE)
    current = _state(final.name, family)
    states: dict[str, list[Path]] = {}
    for folder in cache_dir.glob(f"{glob.escape(family)}*"):
        state = _state(folder.name, family)
        if folder.is_dir() and state != current:
            states.setdefault(state, []).append(folder)
    ranked = sorted(states.values(), key=lambda fs: max(map(_last_used, fs)), reverse=True)
    return [f for folders in ranked[KEPT_STATES:] for f in folders if _evict(f)]
