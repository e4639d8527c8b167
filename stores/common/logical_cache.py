"""Logical fingerprints by physical hash, computed once per process and once per machine.

A store's logical fingerprint reads every row (0.4 s for the Olist world's SQLite file), and
the same bytes always hold the same content, so it is cached by the file's SHA-256: in memory
(`OnceMap`, so concurrent trials wait for one computation) and, given a folder, in one small
file per hash that every later process on the machine reads instead of scanning the tables.
A cached value that is not a SHA-256 hex digest is ignored and computed again.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from stores.common.once import OnceMap
from stores.fingerprint import FINGERPRINT_VERSION

__all__ = ["LogicalCache"]

_DIGEST = re.compile(r"[0-9a-f]{64}")


class LogicalCache:
    """`get(physical, compute)`: the logical fingerprint of the bytes hashed as `physical`."""

    def __init__(self, folder: Path | None = None, *, backend: str = "") -> None:
        self._folder = folder
        self._backend = backend
        self._prefix = f"{backend}-{FINGERPRINT_VERSION.decode()}-"
        self._memo = OnceMap[str, str]()

    def __reduce__(self) -> tuple[object, ...]:
        """A copy in another process (an engine child) shares the folder, not the memo."""
        return _restore, (self._folder, self._backend)

    def get(self, physical: str, compute: Callable[[], str]) -> str:
        return self._memo.get(
            physical, lambda: self._stored(physical) or self._store(physical, compute())
        )

    def _path(self, physical: str) -> Path | None:
        if self._folder is None or not _DIGEST.fullmatch(physical):
            return None
        return self._folder / f"{self._prefix}{physical}"

    def _stored(self, physical: str) -> str | None:
        path = self._path(physical)
        try:
            text = path.read_text().strip() if path is not None else ""
        except OSError:
            return None
        return text if _DIGEST.fullmatch(text) else None

    def _store(self, physical: str, logical: str) -> str:
        """Write `logical` for the next process (atomically; a cache that cannot be written
        only costs that process the computation)."""
        path = self._path(physical)
        if path is None:
            return logical
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "w") as fh:
                fh.write(logical)
            os.replace(tmp, path)
        except OSError:
            pass
        return logical


def _restore(folder: Path | None, backend: str) -> LogicalCache:
    return LogicalCache(folder, backend=backend)
