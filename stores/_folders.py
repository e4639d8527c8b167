"""Item folders on disk: templates built once per source (shared by xdist workers through a
file lock), read-only copies per item, and their removal."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

__all__ = ["copy_folder", "remove_folder", "template_dir"]


def _source_key(parquet_dir: Path, kind: str) -> str:
    digest = hashlib.sha256(kind.encode())
    for path in sorted(parquet_dir.glob("*.parquet")):
        st = path.stat()
        digest.update(f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:16]


def template_dir(
    workdir: Path, parquet_dir: Path, kind: str, build: Callable[[Path], None]
) -> Path:
    """A folder built once by `build(folder)` per source and kind, shared by workers via a lock.

    Keyed by each Parquet file's resolved path, size and mtime, so a regenerated dataset gets a
    new template. `build` writes into a scratch folder that is renamed into place when complete.
    """
    root = workdir / "_templates"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{kind}-{_source_key(parquet_dir, kind)}"
    with FileLock(str(final) + ".lock"):
        if not final.is_dir():
            scratch = root / f".{final.name}.{os.getpid()}.tmp"
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir()
            try:
                build(scratch)
            except Exception:
                shutil.rmtree(scratch, ignore_errors=True)
                raise
            scratch.rename(final)
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
    for folder, _, names in os.walk(path):  # never descends into a linked folder
        for name in names:
            p = Path(folder) / name
            if p.is_file() and not p.is_symlink():  # never chmod what a link points at
                p.chmod(0o644)
    shutil.rmtree(path, ignore_errors=True)
