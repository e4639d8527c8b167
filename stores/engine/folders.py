"""Item folders on disk: templates built once per source content (shared by every process of
a backend, xdist workers and side-by-side sessions alike, through a file lock), read-only copies
per item, and their removal."""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

__all__ = ["TEMPLATES", "copy_folder", "remove_folder", "template_dir", "template_root"]

TEMPLATES = "_templates"


_CONTENT_KEYS: dict[tuple[object, ...], str] = {}
"""Content keys already computed in this process, by the files' identities (path, inode, size,
mtime): a source is read once per process, not once per item."""
_KEYS_LOCK = threading.Lock()


def _source_key(parquet_dir: Path, kind: str) -> str:
    """SHA-256 of the kind and every Parquet file's name and bytes (its first 16 hex digits)."""
    files = sorted(parquet_dir.glob("*.parquet"))
    identity: list[object] = [kind]
    for path in files:
        st = path.stat()
        identity += [str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns]
    key = tuple(identity)
    with _KEYS_LOCK:
        if (known := _CONTENT_KEYS.get(key)) is not None:
            return known
    digest = hashlib.sha256(kind.encode())
    for path in files:
        digest.update(f"{path.name}\0{path.stat().st_size}\0".encode())
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    value = digest.hexdigest()[:16]
    with _KEYS_LOCK:
        _CONTENT_KEYS[key] = value
    return value


def template_root(workdir: Path) -> Path:
    """Where templates of a store with this per-process `workdir` live: beside it, shared by
    every process of the same backend (`<data>/stores/<backend>/_templates` next to
    `<data>/stores/<backend>/<pid>`), or inside a workdir that is not named by a pid."""
    return workdir.parent / TEMPLATES if workdir.name.isdigit() else workdir / TEMPLATES


def template_dir(
    workdir: Path, parquet_dir: Path, kind: str, build: Callable[[Path], None]
) -> Path:
    """A folder built once by `build(folder)` per source content and kind, shared by processes.

    Keyed by the SHA-256 of the Parquet files' bytes, so a regenerated dataset gets a new
    template and identical ones share it. Built into a scratch folder under a file lock and
    renamed into place when complete (a process killed half-way leaves only a scratch folder,
    rebuilt over by the next); read-only once in place (files 0444, folder 0555).
    """
    root = template_root(workdir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{kind}-{_source_key(parquet_dir, kind)}"
    if final.is_dir():
        return final
    with FileLock(str(final) + ".lock"):
        if not final.is_dir():
            for stale in root.glob(f".{final.name}.*.tmp"):  # builds killed half-way
                remove_folder(stale)
            scratch = root / f".{final.name}.{os.getpid()}.tmp"
            scratch.mkdir()
            try:
                build(scratch)
            except Exception:
                remove_folder(scratch)
                raise
            for path in scratch.rglob("*"):
                if path.is_file() and not path.is_symlink():
                    path.chmod(0o444)
            scratch.rename(final)
            final.chmod(0o555)
    return final


def copy_folder(src: Path, dst: Path) -> None:
    """Copy every file of `src` into a new `dst` and mark the copies read-only."""
    dst.mkdir(parents=True)
    for path in src.iterdir():
        if path.is_file():
            target = dst / path.name
            shutil.copyfile(path, target)
            target.chmod(0o444)


def remove_folder(path: Path) -> None:
    """Delete a provisioned folder (read-only files included); a missing folder is fine."""
    if not path.exists():
        return
    path.chmod(0o755)
    for folder, _, names in os.walk(path):  # never descends into a linked folder
        for name in names:
            p = Path(folder) / name
            if p.is_file() and not p.is_symlink():  # never chmod what a link points at
                p.chmod(0o644)
    shutil.rmtree(path, ignore_errors=True)
