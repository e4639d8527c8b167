"""The sqlite backend's template databases: built once per process from Parquet or WAL files.

`build_from_parquet` (`stores.engine.sqlite_copy`, which imports DuckDB) is imported only when a
template is built from Parquet: a dataset with a SQLite file of its own (a built world's
`olist.sqlite`, say) is provisioned without DuckDB, whose import would otherwise come before the
first trial's model request."""

from __future__ import annotations

import os
import secrets
import shutil
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from stores.base import DatasetFiles, StoreError
from stores.common.sqlite_file import quote_ident

if TYPE_CHECKING:
    from stores.engine.sqlite_copy import build_from_parquet

__all__ = ["TemplateCache", "build_from_parquet", "quote_ident"]


def __getattr__(name: str) -> Any:
    """`build_from_parquet`, still importable from here, loaded on first use."""
    if name == "build_from_parquet":
        from stores.engine.sqlite_copy import build_from_parquet

        return build_from_parquet
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class TemplateCache:
    """The file each item's copy is made from, built at most once per dataset version."""

    def __init__(self, workdir: Path) -> None:
        self._workdir = workdir
        self._templates: dict[tuple[object, ...], Path] = {}
        self._template_dir: Path | None = None
        self._lock = threading.Lock()
        """Concurrent trials and data probes provision at once: one build per dataset."""

    def template(self, dataset: DatasetFiles) -> Path:
        """The dataset's own database when usable as is, else one built from it (cached)."""
        files: list[Path] = []
        if dataset.sqlite_path is not None:
            src = dataset.sqlite_path
            if not src.is_file():
                raise StoreError(f"dataset {dataset.name!r}: sqlite_path {src} does not exist")
            if not _is_wal(src):
                return src
            key: tuple[object, ...] = ("wal", str(src.resolve()), _stat_key(src))
        else:
            files = sorted(dataset.parquet_dir.glob("*.parquet"))
            if not files:
                raise StoreError(
                    f"dataset {dataset.name!r} has no sqlite_path and no *.parquet files in "
                    f"{dataset.parquet_dir}; give one of them"
                )
            key = ("parquet", *((str(f.resolve()), _stat_key(f)) for f in files))
        with self._lock:
            return self._built(dataset, key, files)

    def _built(self, dataset: DatasetFiles, key: tuple[object, ...], files: list[Path]) -> Path:
        cached = self._templates.get(key)
        if cached is not None and cached.exists():
            return cached
        if self._template_dir is None:
            self._template_dir = self._workdir / f".templates-{os.getpid()}-{secrets.token_hex(4)}"
            self._template_dir.mkdir(parents=True)
        built = self._template_dir / f"{len(self._templates)}.sqlite"
        if dataset.sqlite_path is not None:
            _copy_out_of_wal(dataset.sqlite_path, built)
        else:
            from stores.engine.sqlite_copy import build_from_parquet

            build_from_parquet(files, built)
        self._templates[key] = built
        return built

    def clear(self) -> None:
        """Delete every template this cache built."""
        with self._lock:
            if self._template_dir is not None:
                shutil.rmtree(self._template_dir, ignore_errors=True)
                self._template_dir = None
            self._templates.clear()


def _stat_key(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def _is_wal(path: Path) -> bool:
    """True when the database header says WAL mode (file format versions 2 at bytes 18-19)."""
    with path.open("rb") as f:
        header = f.read(20)
    return len(header) == 20 and header[18] == 2


def _copy_out_of_wal(src: Path, dest: Path) -> None:
    """Copy a WAL-mode database (its -wal included) into a rollback-journal file."""
    source = sqlite3.connect(f"file:{quote(str(src.resolve()))}?mode=ro", uri=True)
    target = sqlite3.connect(dest)
    try:
        source.backup(target)
        target.execute("PRAGMA journal_mode = DELETE")
    except sqlite3.Error as exc:
        raise StoreError(f"cannot copy WAL database {src}: {exc}") from exc
    finally:
        target.close()
        source.close()
