"""The sqlite backend's template databases: built once per process from Parquet or WAL files."""

from __future__ import annotations

import os
import secrets
import shutil
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from stores.base import DatasetFiles, StoreError

__all__ = ["TemplateCache", "build_from_parquet", "quote_ident"]


def quote_ident(name: str) -> str:
    """`name` as a double-quoted SQLite identifier."""
    return '"' + name.replace('"', '""') + '"'


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


def _parquet_column(field: Any) -> tuple[str, Callable[[Any], object]]:
    """SQLite declared type and a cell converter for one Arrow field."""
    import pyarrow.types as pt

    kind = field.type.value_type if pt.is_dictionary(field.type) else field.type
    same: Callable[[Any], object] = lambda v: v  # noqa: E731
    iso: Callable[[Any], object] = lambda v: None if v is None else v.isoformat()  # noqa: E731
    if pt.is_boolean(kind):
        return "BOOLEAN", lambda v: None if v is None else int(v)
    if pt.is_integer(kind):
        return "INTEGER", same
    if pt.is_floating(kind):
        return "REAL", same
    if pt.is_decimal(kind):
        return "REAL", lambda v: None if v is None else float(v)
    if pt.is_string(kind) or pt.is_large_string(kind):
        return "TEXT", same
    if pt.is_binary(kind) or pt.is_large_binary(kind) or pt.is_fixed_size_binary(kind):
        return "BLOB", same
    if pt.is_timestamp(kind):
        return "TIMESTAMP", lambda v: None if v is None else v.isoformat(sep=" ")
    if pt.is_date(kind) or pt.is_time(kind):
        return ("DATE" if pt.is_date(kind) else "TIME"), iso
    if pt.is_null(kind):
        return "", same
    raise StoreError(
        f"column {field.name!r} has Arrow type {field.type}, which the sqlite backend cannot "
        "store; allowed: bool, integers, floats, decimals, strings, binary, dates, times, "
        "timestamps"
    )


def build_from_parquet(files: list[Path], dest: Path) -> None:
    """A database with one table per `<table>.parquet` file, written under a private temp name."""
    import pyarrow.parquet as pq

    tmp = dest.with_name(f"{dest.name}.{secrets.token_hex(4)}.tmp")
    conn = sqlite3.connect(tmp, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("BEGIN")
        for file in files:
            table = pq.read_table(file)
            specs = [_parquet_column(f) for f in table.schema]
            names = [quote_ident(f.name) for f in table.schema]
            cols = ", ".join(f"{n} {t}".rstrip() for n, (t, _) in zip(names, specs, strict=True))
            conn.execute(f"CREATE TABLE {quote_ident(file.stem)} ({cols})")
            insert = f"INSERT INTO {quote_ident(file.stem)} VALUES ({', '.join('?' * len(names))})"
            for batch in table.to_batches(max_chunksize=20_000):
                columns = [
                    [conv(v) for v in col.to_pylist()]
                    for col, (_, conv) in zip(batch.columns, specs, strict=True)
                ]
                conn.executemany(insert, zip(*columns, strict=True))
        conn.execute("COMMIT")
    except (sqlite3.Error, OSError, StoreError) as exc:
        conn.close()
        tmp.unlink(missing_ok=True)
        if isinstance(exc, StoreError):
            raise
        raise StoreError(f"cannot build a SQLite database from {files[0].parent}: {exc}") from exc
    conn.close()
    tmp.replace(dest)
