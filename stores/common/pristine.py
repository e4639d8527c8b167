"""Copies recognised as unwritten by their stat instead of by reading them again.

A fresh copy gets the mtime `PRISTINE_MTIME_NS` (1970-01-01T00:00:01Z), which any write moves to
the present, and every write, chmod or utime moves its ctime: while a copy's inode, size, mode,
mtime and ctime are the ones taken right after it was made, its bytes are the ones it was made
with, and their hash is the one known then.
"""

from __future__ import annotations

import os
from pathlib import Path

from stores.base import StoreError
from stores.fingerprint import file_sha256

__all__ = ["PRISTINE_MTIME_NS", "Known", "hashes_unless_moved", "same_state", "set_pristine"]

PRISTINE_MTIME_NS = 1_000_000_000
"""The mtime a fresh copy gets (1970-01-01T00:00:01Z): a write sets the present instead."""

Known = dict[str, tuple[os.stat_result, str]]
"""Relative path -> (the copy's stat when it was made, the SHA-256 of its bytes then)."""


def same_state(before: os.stat_result, now: os.stat_result) -> bool:
    """Nothing wrote the file between the two stats (same inode, size, times, mode)."""
    fields = ("st_ino", "st_size", "st_mtime_ns", "st_ctime_ns", "st_mode")
    return all(getattr(before, f) == getattr(now, f) for f in fields)


def set_pristine(path: Path) -> os.stat_result:
    """Give a fresh copy the pristine mtime; its stat afterwards (the one to compare with)."""
    os.utime(path, ns=(PRISTINE_MTIME_NS, PRISTINE_MTIME_NS))
    return path.stat()


def hashes_unless_moved(root: Path, known: Known) -> list[tuple[str, str]]:
    """`stores.fingerprint.file_hashes(root)`, taking a file's hash from `known` without
    reading it while its stat is the one recorded there; an entry whose file moved is dropped
    (written once, hashed from then on)."""
    if not root.is_dir():
        raise StoreError(f"cannot hash store folder {root}: not a directory")
    out = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        entry = known.get(rel)
        if entry is not None and same_state(entry[0], path.stat()):
            out.append((rel, entry[1]))
            continue
        known.pop(rel, None)
        out.append((rel, file_sha256(path)))
    return out
