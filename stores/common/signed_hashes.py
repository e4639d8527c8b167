"""Content hashes of files used in place, cached by what any write moves.

A file's signature (device, inode, size, mode, mtime and ctime in nanoseconds) moves with
every write, truncation, replacement or chmod, and reading it costs one `stat`: so a store
used in place checks it per trial in O(1) of the data's size. The content's SHA-256 is streamed
once per state (`hashlib.file_digest`, bounded memory) and cached by that signature, in memory
and in one small file per signature under a folder that the next process reads; a hash is
cached on disk only when the signature did not move while the file was read. A folder of
files (a Parquet or CSV folder, a DuckDB file and its WAL) is the list of its files' signatures
and one digest over their names and hashes (`SignedHashes.many`), so a write to one file hashes
that file again, not the others. `SignedHashes.recheck` streams again, with no cache, every
hash this process took from the disk cache without reading the file: the exact check at the
end of a run, for a cache left stale (a file system whose times are too coarse to move, a
cache file written by hand).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
from pathlib import Path

from stores.common.once import OnceMap
from stores.fingerprint import file_sha256

__all__ = ["Signature", "SignedHashes", "signature"]

_DIGEST = re.compile(r"[0-9a-f]{64}")

Signature = tuple[int, int, int, int, int, int]


def signature(state: os.stat_result) -> Signature:
    """What moves when a file is written, replaced, truncated or has its mode changed."""
    return (
        state.st_dev,
        state.st_ino,
        state.st_size,
        state.st_mode,
        state.st_mtime_ns,
        state.st_ctime_ns,
    )


class SignedHashes:
    """A file's SHA-256 by (real path, signature): streamed once per state of the file."""

    def __init__(self, folder: Path | None) -> None:
        self._folder = folder
        self._memo = OnceMap[str, str]()
        self._trusted: dict[str, tuple[Path, Signature, str]] = {}
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[type[SignedHashes], tuple[Path | None]]:
        """A copy in another process (an engine child) shares the folder, not the memo."""
        return SignedHashes, (self._folder,)

    def get(self, path: Path) -> tuple[os.stat_result, str]:
        """The file's stat now and its content hash (computed, or cached for that stat)."""
        real = path.resolve()
        state = real.stat()
        key = hashlib.sha256(f"{real}\0{signature(state)}".encode()).hexdigest()
        return state, self._memo.get(key, lambda: self._cached(real, state, key))

    def _cached(self, real: Path, state: os.stat_result, key: str) -> str:
        stored = self._stored(key)
        if stored is None:
            return self._hash(real, key)
        with self._lock:
            self._trusted[key] = (real, signature(state), stored)
        return stored

    def many(self, paths: list[Path]) -> tuple[list[Signature], str]:
        """The signatures of `paths` (in order) and one digest over their names and hashes:
        O(number of files) stats per call while nothing moved."""
        states: list[Signature] = []
        digest = hashlib.sha256(b"backintel-files-v1")
        for path in paths:
            state, sha = self.get(path)
            states.append(signature(state))
            digest.update(f"{path.name}\0{state.st_size}\0{sha}\n".encode())
        return states, digest.hexdigest()

    def recheck(self) -> list[str]:
        """Every file whose hash came from the disk cache, streamed again: the files whose
        bytes do not match that hash under an unchanged signature, as messages. A file that
        has since moved to a new signature, or gone, is not a mismatch of that state."""
        with self._lock:
            handed, self._trusted = list(self._trusted.values()), {}
        problems = []
        for real, sig, digest in handed:
            try:
                if signature(real.stat()) != sig:
                    continue
                now = file_sha256(real)
            except Exception:  # gone since: nothing to compare
                continue
            if now != digest:
                problems.append(
                    f"{real} holds other bytes than when it was hashed with the same size and "
                    f"times ({digest[:12]} -> {now[:12]})"
                )
        return problems

    def _stored(self, key: str) -> str | None:
        if self._folder is None:
            return None
        try:
            text = (self._folder / key).read_text().strip()
        except OSError:
            return None
        return text if _DIGEST.fullmatch(text) else None

    def _hash(self, real: Path, key: str) -> str:
        before = real.stat()
        digest = file_sha256(real)
        if signature(real.stat()) != signature(before) or self._folder is None:
            return digest  # moved while read: good for this call, never cached on disk
        try:
            self._folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self._folder, prefix=".tmp-")
            with os.fdopen(fd, "w") as fh:
                fh.write(digest)
            os.replace(tmp, self._folder / key)
        except OSError:
            pass
        return digest
