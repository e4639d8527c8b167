"""`sqlite` for a user's own SQLite file, used in place: no per-item copy.

Each item gets an opaque per-item name, `<workdir>/<opaque id>.sqlite`, a symbolic link to
the source (or, for a WAL-mode source, to one rollback-journal copy per process and state,
`stores.sqlite.build.TemplateCache`). Every analyst connection opens it read-only (`mode=ro`,
`query_only`, the authorizer of `stores.sqlite.policy`) and a sandbox mounts the resolved
file read-only, so nothing an analyst sends can write it; a trial costs the same at 1 MB and
at 10 GB.

Change detection per trial is O(1): the file's signature (inode, size, mode, mtime and ctime
in nanoseconds; any write moves mtime and ctime) is compared with the one taken when the
item was provisioned. The content's SHA-256 is streamed once per state of the file and cached
by that signature (`stores.common.signed_hashes`), in memory and in one small file per
signature under
`<data>/stores/hashes` for the next process. Its logical fingerprint, read once per content hash
and cached like it, is DuckDB's one-pass summary where DuckDB reads a table exactly
(`stores.sqlite.fingerprint.sqlite_source_fingerprint`): about one read of the file, where the
copies' sorted-rows family takes some 60 s per GB.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from stores.base import DatasetFiles, Store, StoreError, ViewProbeKind, load_object, new_store_id
from stores.capabilities import StoreCapabilities
from stores.common.logical_cache import LogicalCache
from stores.common.signed_hashes import SignedHashes, signature
from stores.sqlite.fingerprint import sqlite_logical_fingerprint, sqlite_source_fingerprint
from stores.sqlite.store import SQLiteProvisionedStore, SQLiteStore

__all__ = ["SQLiteSourceStore", "SignedHashes", "signature"]


class SQLiteSourceStore(SQLiteStore):
    """The `sqlite` backend over a user's file in place: per item an opaque link, no copy."""

    name: ClassVar[str] = "sqlite"
    capabilities = StoreCapabilities(
        in_place=True, perturbation="views", sandbox_mount="file", denies_grants=True
    )

    def view_probe_kind(self, form: str | None) -> ViewProbeKind | None:
        """Views over the SQLite file (`stores.sqlite.perturb_views`,
        imported when a probe is built)."""
        if form != "sqlite":
            return None
        kind: ViewProbeKind = load_object("stores.sqlite.perturb_views:SQLITE_VIEWS")
        return kind

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
        """The SQLite file the binding names (found again per item from its files)."""
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
        self._logical_cache = LogicalCache(shared / "logical", backend="sqlite-source")

    def source_file(self, dataset: DatasetFiles) -> Path:
        """The file items read: the source itself, or its rollback-journal copy when the
        source is in WAL mode (made once per process and state)."""
        return self._templates.template(dataset).resolve()

    def older_fingerprint(self, dataset: DatasetFiles, method: str) -> str | None:
        """The source's data hash by an older method (`stores.common.fingerprint_methods.
        OLDER`), to verify a lock file an older release wrote; None for a method it lacks."""
        if method != "sqlite-sorted-rows-v1":
            return None
        import sqlite3

        uri = f"{self.source_file(dataset).as_uri()}?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read dataset {dataset.name!r}: {exc}") from exc
        try:
            return sqlite_logical_fingerprint(conn)
        finally:
            conn.close()

    def provision(self, dataset: DatasetFiles) -> SQLiteProvisionedStore:
        source = self.source_file(dataset)
        self.workdir.mkdir(parents=True, exist_ok=True)
        while True:  # the id is random; a (vanishingly rare) clash retries
            store_id = new_store_id()
            link = self.workdir / f"{store_id}.sqlite"
            try:
                link.symlink_to(source)
                break
            except FileExistsError:
                continue
            except OSError as exc:
                raise StoreError(f"cannot name dataset {dataset.name!r} as {link}: {exc}") from exc
        store = SQLiteProvisionedStore(
            link,
            store_id,
            self.statement_timeout_s,
            on_teardown=lambda sid: self._live.pop(sid, None),
            logical_cache=self._logical_cache,
            denied=dataset.denied,
            logical_of=sqlite_source_fingerprint,
            row_counts=self._row_counts,
        )
        try:
            state, physical = self._hashes.get(source)
        except OSError as exc:
            store.teardown()
            raise StoreError(f"cannot read dataset {dataset.name!r} at {source}: {exc}") from exc
        store.mark_pristine(state, physical)
        self._live[store_id] = store
        return store
