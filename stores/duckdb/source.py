"""`duckdb`, `lake-parquet` and `files` over a user's own DuckDB file, Parquet folder or CSV
folder, used in place: no per-item copy.

Each item gets a folder of its own under an opaque id holding only symbolic links to the
source: `store.duckdb` (and `store.duckdb.wal` when the source has one) for a DuckDB file;
for a folder, `data/` and `catalog.duckdb`, a small database of views over the folder's files
(what `stores.files.lake` builds over a copy), built once per state of the folder and shared by its
items. The analyst's connection attaches the
DuckDB file read-only under the alias `store` (so no name of the source shows), or opens the
catalog read-only with external access limited to the folder's link beside it; either way the
configuration is locked and the SQL policy (`stores.engine.policy`) refuses file functions,
ATTACH and COPY, so each item reaches only its own dataset and nothing can write it. A sandbox
mounts the resolved file or folder read-only.

Change detection per trial is O(number of files): the signature (inode, size, mode, mtime,
ctime) of every file the source is made of, with the content hash streamed once per state and
cached by signature (`stores.common.signed_hashes`); the logical fingerprint (`summary_digest`,
computed by DuckDB in one pass in bounded memory) once per content hash, cached on disk
(`stores.common.logical_cache`). At the end of the session every hash taken from the disk cache is
streamed again (`teardown_session`); a mismatch is a warning naming the file.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import duckdb

from stores.base import (
    DatasetFiles,
    Fingerprint,
    Store,
    StoreError,
    ViewProbeKind,
    load_object,
    new_store_id,
)
from stores.capabilities import StoreCapabilities
from stores.common.logical_cache import LogicalCache
from stores.common.once import OnceMap
from stores.common.signed_hashes import Signature, SignedHashes
from stores.duckdb.reading import (
    DATA,
    DB_NAME,
    FINGERPRINT_MEMORY,
    DuckDBSource,
    open_attached,
    open_source,
)
from stores.engine.common import (
    FolderItem,
    logical_fingerprint,
    open_guarded,
    quote_ident,
)
from stores.engine.views import build_view_catalog

__all__ = [
    "CsvSourceStore",
    "DuckDBFileSourceStore",
    "DuckDBSource",
    "DuckDBSourceStore",
    "ParquetSourceStore",
    "SourceItem",
    "open_attached",
    "quote_ident",
]

CATALOG = "catalog.duckdb"


class SourceItem(FolderItem):
    """One item's folder of links to the source, fingerprinted by the source's signature."""

    def __init__(
        self,
        backend: str,
        store_id: str,
        root: Path,
        timeout_s: float,
        source: DuckDBSource,
        hashes: SignedHashes,
        logical: LogicalCache,
    ) -> None:
        super().__init__(backend, store_id, root, timeout_s)
        self.source = source
        self._hashes = hashes
        self._logical = logical

    @property
    def mount_path(self) -> Path | None:
        return self.root / (DB_NAME if self.source.kind == "duckdb" else DATA)

    def _open(self) -> duckdb.DuckDBPyConnection:
        if self.source.kind == "duckdb":
            return open_attached(self.root / DB_NAME)
        catalog = (self.root / CATALOG).resolve()  # shared by the items of one source state
        return open_guarded(catalog, allowed_dirs=[catalog.parent / DATA])

    def _state(self) -> tuple[list[Signature], str]:
        try:
            return self._hashes.many(self.source.files())
        except OSError as exc:
            raise StoreError(f"cannot read the source of {self.display_id}: {exc}") from exc

    def fingerprint(self) -> Fingerprint:
        """Physical: one digest over the source files' hashes, each cached by its signature
        (a stat per file while nothing moved); logical: computed in DuckDB once per physical."""
        self._require()
        state, physical = self._state()
        return Fingerprint(
            logical=self._logical.get(physical, lambda: self._logical_now(state)),
            physical=physical,
        )

    def _logical_now(self, state: list[Signature]) -> str:
        self._require()
        conn = open_source(self.source, FINGERPRINT_MEMORY)
        try:
            logical = logical_fingerprint(conn)
        except duckdb.Error as exc:
            raise StoreError(f"cannot fingerprint store {self.display_id}: {exc}") from exc
        finally:
            conn.close()
        if self._state()[0] != state:
            raise StoreError(f"store {self.display_id} changed while it was fingerprinted")
        return logical

    def teardown(self) -> None:
        """Remove the item's links and catalog; never follows a link into the source."""
        if not self.root.is_dir() or self.root.is_symlink():
            return
        for path in self.root.iterdir():
            if path.is_symlink() or path.is_file():
                path.unlink(missing_ok=True)
        shutil.rmtree(self.root, ignore_errors=True)


class DuckDBSourceStore(Store):
    """A DuckDB-served source of a user's own, used in place: per item a folder of links."""

    capabilities = StoreCapabilities(in_place=True, perturbation="views", dialect="duckdb")

    def view_probe_kind(self, form: str | None) -> ViewProbeKind | None:
        """Views over the DuckDB file, Parquet or CSV folder (`stores.duckdb.perturb_views`,
        imported when a probe is built)."""
        if form not in ("duckdb", "parquet", "csv"):
            return None
        kind: ViewProbeKind = load_object("stores.duckdb.perturb_views:DUCKDB_VIEWS")
        return kind

    kind: ClassVar[str]

    @classmethod
    def for_source(
        cls,
        workdir: Path,
        location: str,
        *,
        role: str | None = None,
        cache_dir: Path | None = None,
        dsn_env: str | None = None,
    ) -> Store:
        """The file or folder the binding names (found again per item from its files)."""
        return cls(workdir, cache_dir=cache_dir)

    def __init__(
        self,
        workdir: Path,
        *,
        statement_timeout_s: float | None = None,
        cache_dir: Path | None = None,
    ) -> None:
        super().__init__(workdir, statement_timeout_s=statement_timeout_s)
        shared = cache_dir or self.workdir.parent  # what every process of this source reads
        self._hashes = SignedHashes(shared / "hashes")
        self._logical = LogicalCache(shared / "logical", backend=self.name)
        self._live: dict[str, SourceItem] = {}
        self._catalogs = OnceMap[str, Path]()
        self.changes: list[str] = []
        """Changes found by the end-of-run re-read (the session puts them in `run.json`
        `source_changes` and the terminal summary)."""

    def location(self, dataset: DatasetFiles) -> Path:
        """Where the source is (`dataset.extra[kind]`, or the Parquet folder)."""
        found = dataset.extra.get(self.kind) if self.kind != "parquet" else dataset.parquet_dir
        if found is None or not found.exists():
            raise StoreError(f"dataset {dataset.name!r}: no {self.kind} source at {found}")
        return found

    def source(self, dataset: DatasetFiles) -> DuckDBSource:
        return DuckDBSource(self.kind, self.location(dataset))

    def digest(self, dataset: DatasetFiles) -> str:
        """The source's content digest now (a stat per file while nothing moved)."""
        return self._hashes.many(self.source(dataset).files())[1]

    def provision(self, dataset: DatasetFiles) -> SourceItem:
        source = self.source(dataset)
        if source.kind != "duckdb" and not source.selects(source.location):
            raise StoreError(
                f"dataset {dataset.name!r}: no *.{source.kind} files in {source.location}"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        while True:  # the id is random; a (vanishingly rare) clash retries
            store_id = new_store_id()
            root = self.workdir / store_id
            try:
                root.mkdir()
                break
            except FileExistsError:
                continue
        item = SourceItem(
            self.name,
            store_id,
            root,
            self.statement_timeout_s,
            source,
            self._hashes,
            self._logical,
        )
        try:
            self._link(source, root)
            item.fingerprint()  # hashes a new state once; a stat per file after that
        except (OSError, duckdb.Error, StoreError) as exc:
            item.teardown()
            raise StoreError(
                f"cannot serve dataset {dataset.name!r} from {source.location}: {exc}"
            ) from exc
        self._live[store_id] = item
        return item

    def _link(self, source: DuckDBSource, root: Path) -> None:
        if source.kind == "duckdb":
            (root / DB_NAME).symlink_to(source.location)
            if len(files := source.files()) > 1:
                (root / f"{DB_NAME}.wal").symlink_to(files[1])
            return
        (root / DATA).symlink_to(source.location, target_is_directory=True)
        digest = self._hashes.many(source.files())[1]
        catalog = self._catalogs.get(digest, lambda: self._catalog(source, digest))
        (root / CATALOG).symlink_to(catalog)

    def _catalog(self, source: DuckDBSource, digest: str) -> Path:
        """The views over a folder, built once per state of its files in this process:
        `_catalogs/<digest>/catalog.duckdb` over `_catalogs/<digest>/data`, a link to it."""
        folder = self.workdir / "_catalogs" / digest[:16]
        shutil.rmtree(folder, ignore_errors=True)  # a link inside is removed, not followed
        folder.mkdir(parents=True)
        (folder / DATA).symlink_to(source.location, target_is_directory=True)
        build_view_catalog(folder / CATALOG, source.selects(folder / DATA))
        (folder / CATALOG).chmod(0o444)
        return folder / CATALOG

    def teardown_session(self) -> None:
        """Tear down the items left, then stream again every content hash taken from the disk
        cache: bytes that changed behind an unchanged signature are kept in `changes`."""
        for item in list(self._live.values()):
            item.teardown()
        self._live.clear()
        self.changes += [f"the source changed during the run: {p}" for p in self._hashes.recheck()]


class DuckDBFileSourceStore(DuckDBSourceStore):
    """A user's own DuckDB file (`dataset.extra["duckdb"]`): tables, types and constraints
    exactly as in the source, attached read-only."""

    name: ClassVar[str] = "duckdb"
    capabilities = replace(DuckDBSourceStore.capabilities, sandbox_mount="file")
    kind: ClassVar[str] = "duckdb"


class ParquetSourceStore(DuckDBSourceStore):
    """A user's own folder of `<table>.parquet` files, read through views."""

    name: ClassVar[str] = "lake-parquet"
    kind: ClassVar[str] = "parquet"


class CsvSourceStore(DuckDBSourceStore):
    """A user's own folder of `<table>.csv` files, read through views: column types pinned by
    `_schema.json` in the folder (as `files` writes it) when present, else detected by DuckDB."""

    name: ClassVar[str] = "files"
    kind: ClassVar[str] = "csv"


SOURCE_STORES: dict[str, type[DuckDBSourceStore]] = {
    "duckdb": DuckDBFileSourceStore,
    "parquet": ParquetSourceStore,
    "csv": CsvSourceStore,
}
"""The store serving each kind of source in place, by source kind."""
