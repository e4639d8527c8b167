"""`run_python` for a scenario with a declared scope: what the sandbox mounts, and which
out-of-scope tables a call read.

Code in the sandbox can open any file of its mount, so reads are observed below the code: the
item's Python store is a folder of one `<table>.parquet` per table (copied from the world's
canonical Parquet), and the harness watches every out-of-scope table's file with inotify
(`IN_OPEN`/`IN_ACCESS`, which the kernel reports for the file whichever mount or namespace
opened it) while each call runs. What cannot be observed is not mounted: a table whose grant
is denied, and the forbidden columns of a column-level entry (their table is mounted without
them). `backintel_store.duckdb()` makes no view over an out-of-scope table (listed in the
folder's `_out_of_scope.txt`), so opening one is always the code's own doing. Statements sent
over the sandbox's query channel (`backintel_store.query`) are kept per call (`call_sql`,
`evidence_sql`) and planned again like `run_sql`'s (`pytest_backintel.run.scope`).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sqlite3
import struct
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

from pytest_backintel.evidence.item_python import ItemPython
from pytest_backintel.evidence.query_channel import SessionSource
from pytest_backintel.sandbox.base import SandboxProvider
from pytest_backintel.scenario import ScopeSpec
from stores.base import DatasetFiles, Store, StoreError

__all__ = [
    "OUT_OF_SCOPE_FILE",
    "ScopedPython",
    "item_files",
    "scopeable",
    "scoped_folder",
    "watch_opens",
]

OUT_OF_SCOPE_FILE = "_out_of_scope.txt"
_IN_ACCESS, _IN_OPEN = 0x00000001, 0x00000020
_EVENT = struct.Struct("iIII")


def scopeable(files: DatasetFiles) -> bool:
    """Whether the data can be laid out as a scoped folder (Parquet tables or a SQLite file)."""
    return files.sqlite_path is not None or any(files.parquet_dir.glob("*.parquet"))


def _tables(files: DatasetFiles) -> dict[str, Callable[[], pl.DataFrame]]:
    """Each table's loader: the canonical Parquet when there is one, else the SQLite file."""
    import polars as pl  # on first use: importing it costs every run 0.15 s of CPU at start

    if files.parquet_dir.is_dir() and any(files.parquet_dir.glob("*.parquet")):
        return {
            p.stem: partial(pl.read_parquet, p) for p in sorted(files.parquet_dir.glob("*.parquet"))
        }
    assert files.sqlite_path is not None
    uri = f"{files.sqlite_path.as_uri()}?mode=ro"
    with sqlite3.connect(uri, uri=True) as conn:
        names = [
            str(r[0])
            for r in conn.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]

    def load(name: str) -> pl.DataFrame:
        with sqlite3.connect(uri, uri=True) as conn:
            cur = conn.execute(f'SELECT * FROM "{name.replace(chr(34), chr(34) * 2)}"')
            cols = [d[0] for d in cur.description]
            return pl.DataFrame(cur.fetchall(), schema=cols, orient="row", infer_schema_length=None)

    return {n: partial(load, n) for n in sorted(names)}


def scoped_folder(files: DatasetFiles, scope: ScopeSpec, dest: Path) -> dict[str, Path]:
    """Write the item's Python store into `dest`; the out-of-scope tables' files by name."""
    dest.mkdir(parents=True, exist_ok=True)
    denied = {t.lower() for t in scope.denied_tables()}
    columns = {t.lower(): c for t, c in scope.forbidden_columns().items()}
    forbidden = {t.lower() for t in scope.forbidden_tables()}
    watched: dict[str, Path] = {}
    for table, load in _tables(files).items():
        name = table.lower()
        target = dest / f"{table}.parquet"
        if name in denied:
            continue
        src = files.parquet_dir / f"{table}.parquet"
        if name in columns:
            frame = load()
            frame.drop([c for c in frame.columns if c in columns[name]]).write_parquet(target)
        elif src.is_file():
            shutil.copyfile(src, target)
        else:
            load().write_parquet(target)
        if name in forbidden:
            watched[table] = target
    (dest / OUT_OF_SCOPE_FILE).write_text("".join(f"{t}\n" for t in sorted(watched)))
    for path in dest.iterdir():
        path.chmod(0o444)
    return watched


@contextmanager
def watch_opens(files: Mapping[str, Path]) -> Iterator[set[str]]:
    """The names of `files` opened or read while the block runs (inotify, Linux)."""
    opened: set[str] = set()
    if not files:
        yield opened
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "inotify_init1"):
        raise StoreError("reads in run_python are watched with inotify, which needs Linux")
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        raise StoreError(f"inotify_init1 failed: {os.strerror(ctypes.get_errno())}")
    try:
        watches: dict[int, str] = {}
        for name, path in files.items():
            wd = libc.inotify_add_watch(fd, os.fsencode(path), _IN_OPEN | _IN_ACCESS)
            if wd < 0:
                raise StoreError(f"cannot watch {path}: {os.strerror(ctypes.get_errno())}")
            watches[wd] = name
        yield opened
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                break
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, _mask, _cookie, length = _EVENT.unpack_from(data, offset)
                if wd in watches:
                    opened.add(watches[wd])
                offset += _EVENT.size + length
    finally:
        os.close(fd)


class ScopedPython:
    """The item's Python over its scoped folder, recording each call's out-of-scope reads."""

    def __init__(
        self,
        provider: SandboxProvider,
        files: DatasetFiles,
        scope: ScopeSpec,
        session: SessionSource | None = None,
    ) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="bi_scope_", dir=provider_dir(provider)))
        self._watched = scoped_folder(files, scope, self._dir / "store")
        self._inner = ItemPython(provider, self._dir / "store", session)
        self.call_reads: list[set[str]] = []
        """Per `run_python` call, in order: the out-of-scope tables it read."""
        self.evidence_reads: list[set[str]] = []
        """Per Python evidence re-run: the out-of-scope tables it read."""

    @property
    def mount(self) -> Path:
        return self._dir / "store"

    @property
    def call_sql(self) -> list[list[str]]:
        """Per `run_python` call: the statements it sent over the query channel."""
        return self._inner.call_sql

    @property
    def evidence_sql(self) -> list[list[str]]:
        """Per Python evidence re-run: the statements it sent over the query channel."""
        return self._inner.evidence_sql

    def _watched_call(self, fn: Callable[[str], Any], code: str, log: list[set[str]]) -> Any:
        with watch_opens(self._watched) as opened:
            try:
                return fn(code)
            finally:
                log.append(opened)

    def run(self, code: str) -> str:
        out: str = self._watched_call(self._inner.run, code, self.call_reads)
        return out

    def evidence(self, code: str) -> Mapping[str, Any]:
        values: Mapping[str, Any] = self._watched_call(
            self._inner.evidence, code, self.evidence_reads
        )
        return values

    def close(self) -> None:
        self._inner.close()
        for path in self._dir.rglob("*"):
            if path.is_file():
                path.chmod(0o600)
        shutil.rmtree(self._dir, ignore_errors=True)


def provider_dir(provider: SandboxProvider) -> Path:
    """A folder beside the provider's work (the sandbox can mount from it)."""
    workdir = getattr(provider, "workdir", None)
    root = Path(workdir) if workdir is not None else Path(tempfile.gettempdir())
    root.mkdir(parents=True, exist_ok=True)
    return root


def item_files(files: DatasetFiles, scope: ScopeSpec | None, store: Store) -> DatasetFiles:
    """The files an item is provisioned from: with the scope's denied grants, which only a
    backend that declares it can withhold a grant (`capabilities.denies_grants`) provisions."""
    denied = scope.denied_tables() if scope is not None else ()
    if not denied:
        return files
    if not store.capabilities.denies_grants:
        raise StoreError(
            f"the {store.name} backend cannot withhold a read grant (denies_grants; denied: "
            f"{', '.join(denied)}); run this scenario with --store sqlite or --store postgres"
        )
    return replace(files, denied=denied)
