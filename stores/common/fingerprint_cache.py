"""Logical fingerprints on disk, by physical hash: identical bytes hold identical content.

`stores.engine.common.cached_fingerprint` keeps an in-process LRU in front of this cache; a
run's session points it at a folder of its data dir (`use_folder`), so a later process skips
the DuckDB pass over every row. An entry is named by the physical sha256 and the method (the
fingerprint's version and the engine's), written to a temporary file and renamed, so concurrent
workers read whole entries or none; one that does not parse or names another hash is ignored
and computed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

__all__ = ["cache_folder", "read_logical", "use_folder", "write_logical"]

_FOLDER: list[Path] = []
_HEX64 = re.compile(r"[0-9a-f]{64}")


def use_folder(folder: Path | None) -> None:
    """Keep fingerprints under `folder` from now on in this process (None: in memory only)."""
    _FOLDER[:] = [folder] if folder is not None else []


def cache_folder() -> Path | None:
    """Where fingerprints are kept on disk, if anywhere."""
    return _FOLDER[0] if _FOLDER else None


def _entry(folder: Path, physical: str, method: str) -> Path:
    name = hashlib.sha256(f"{method}\0{physical}".encode()).hexdigest()
    return folder / f"{name}.json"


def read_logical(physical: str, method: str) -> str | None:
    """The logical fingerprint kept for `physical` by `method`, or None (none, or damaged)."""
    folder = cache_folder()
    if folder is None:
        return None
    try:
        raw = json.loads(_entry(folder, physical, method).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or raw.get("physical") != physical or raw.get("method") != method:
        return None
    logical = raw.get("logical")
    return logical if isinstance(logical, str) and _HEX64.fullmatch(logical) else None


def write_logical(physical: str, method: str, logical: str) -> None:
    """Keep `logical` for `physical` by `method`; a folder that cannot be written is skipped."""
    folder = cache_folder()
    if folder is None:
        return
    tmp = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".fingerprint-", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"physical": physical, "method": method, "logical": logical}, out)
        os.replace(tmp, _entry(folder, physical, method))
    except OSError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
