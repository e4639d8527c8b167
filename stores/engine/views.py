"""A folder of data files and a read-only DuckDB catalog of views over them: the item of the
lake-parquet, files and iceberg stores, and the catalog a DuckDB source's probe reads."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path

import duckdb

from stores.base import Attachment, Store, StoreError, new_store_id
from stores.common.once import OnceMap
from stores.common.pristine import Known, hashes_unless_moved, set_pristine
from stores.common.signed_hashes import Signature, signature
from stores.engine.common import FolderItem, copy_folder, open_guarded, quote_ident, remove_folder
from stores.fingerprint import file_sha256, tree_digest

__all__ = ["CATALOG", "DATA", "ProvisionedViews", "build_view_catalog", "provision_views"]


CATALOG = "catalog.duckdb"


DATA = "data"


ITEM_MARK = "\0backintel-item-folder\0"
"""Stands for an item's own folder in its catalog's content key (no path holds a NUL byte)."""

_SOURCE_HASHES = OnceMap[tuple[str, Signature], str]()
"""The SHA-256 of a file items are copied from, by its real path and signature: a template
(TPC-H's Parquet, 311 MB) is read once per process, not twice per item."""


def build_view_catalog(db_path: Path, views: Mapping[str, str]) -> None:
    """A DuckDB file at `db_path` holding `CREATE VIEW <name> AS <select>` for each view."""
    conn = duckdb.connect(str(db_path), config={"autoload_known_extensions": "false"})
    try:
        for name, select in sorted(views.items()):
            conn.execute(f"CREATE VIEW {quote_ident(name)} AS {select}")
        conn.execute("CHECKPOINT")
    finally:
        conn.close()


class ProvisionedViews(FolderItem):
    """A folder of data files and a read-only catalog of views over them."""

    @property
    def mount_path(self) -> Path | None:
        return self.root / DATA

    def attachment(self) -> Attachment | None:
        return Attachment(
            str(self.root / CATALOG), "duckdb", "main", (self.mount_path or self.root,)
        )

    def _open(self) -> duckdb.DuckDBPyConnection:
        return open_guarded(self.root / CATALOG, allowed_dirs=[self.root / DATA])

    built: tuple[str, str] | None = None
    """(sha256 of the catalog as `provision_views` wrote it, a digest of its views with the
    item's folder replaced by `ITEM_MARK`); None: not known."""

    pristine: Known | None = None
    """The files `provision_views` wrote, with their stat and hash then: while a file's stat is
    that one its hash is not read again (`stores.common.pristine`)."""

    def _content_hashes(self) -> tuple[str, str]:
        """The physical hash, and a content key for the logical fingerprint on disk: every
        item's catalog names the item's own folder, so no two items share their bytes. While
        the catalog is the one built, its views (the folder replaced by a mark) and the data
        files' hashes name what it reads; a changed catalog is keyed by its bytes."""
        if self.pristine is None:
            self.pristine = {}
        hashes = hashes_unless_moved(self.root, self.pristine)
        physical = tree_digest(hashes)
        if self.built is None or dict(hashes).get(CATALOG) != self.built[0]:
            return physical, physical
        data = [(rel, sha) for rel, sha in hashes if rel != CATALOG]
        return physical, tree_digest([*data, (CATALOG, self.built[1])])


def provision_views(
    store: Store,
    template: Path,
    view_for: Callable[[Path], str | None],
) -> ProvisionedViews:
    """Copy `template` into a fresh item folder and build its catalog; `view_for(file)` gives
    the SELECT over one copied file, or None to skip the file."""
    store_id = new_store_id()
    root = store.workdir / store_id
    known = _copy_pristine(template, root)
    views: dict[str, str] = {}
    for path in sorted((root / DATA).iterdir()):
        select = view_for(path)
        if select is not None:
            views[path.name.split(".", 1)[0]] = select
    try:
        build_view_catalog(root / CATALOG, views)
    except duckdb.Error as exc:
        remove_folder(root)
        raise StoreError(
            f"cannot build the view catalog for {store.name}:{store_id}: {exc}"
        ) from exc
    item = ProvisionedViews(store.name, store_id, root, store.statement_timeout_s)
    marked = {name: select.replace(str(root), ITEM_MARK) for name, select in views.items()}
    text = json.dumps(["views-v1", sorted(marked.items())])
    catalog_state = set_pristine(root / CATALOG)
    item.built = (file_sha256(root / CATALOG), hashlib.sha256(text.encode()).hexdigest())
    item.pristine = {**known, CATALOG: (catalog_state, item.built[0])}
    return item


def _copy_pristine(template: Path, root: Path) -> Known:
    """Copy `template`'s files into `root/data` (`copy_folder`), each copy with the pristine
    mtime; per copy its stat and the hash of the file it was copied from, for the files whose
    signature did not move while they were copied and hashed."""
    before = {p.name: signature(p.stat()) for p in template.iterdir() if p.is_file()}
    copy_folder(template, root / DATA)
    known: Known = {}
    for name, sig in before.items():
        source = template / name
        digest = _SOURCE_HASHES.get((str(source.resolve()), sig), partial(file_sha256, source))
        if signature(source.stat()) == sig:
            known[f"{DATA}/{name}"] = (set_pristine(root / DATA / name), digest)
    return known
