"""A folder of data files and a read-only DuckDB catalog of views over them: the item of the
lake-parquet, files and iceberg stores, and the catalog a DuckDB source's probe reads."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path

import duckdb

from stores.base import Attachment, Store, StoreError, new_store_id
from stores.engine.common import FolderItem, copy_folder, open_guarded, quote_ident, remove_folder
from stores.fingerprint import file_hashes, file_sha256, tree_digest

__all__ = ["CATALOG", "DATA", "ProvisionedViews", "build_view_catalog", "provision_views"]


CATALOG = "catalog.duckdb"


DATA = "data"


ITEM_MARK = "\0backintel-item-folder\0"
"""Stands for an item's own folder in its catalog's content key (no path holds a NUL byte)."""


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

    def _content_hashes(self) -> tuple[str, str]:
        """The physical hash, and a content key for the logical fingerprint on disk: every
        item's catalog names the item's own folder, so no two items share their bytes. While
        the catalog is the one built, its views (the folder replaced by a mark) and the data
        files' hashes name what it reads; a changed catalog is keyed by its bytes."""
        hashes = file_hashes(self.root)
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
    copy_folder(template, root / DATA)
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
    item.built = (file_sha256(root / CATALOG), hashlib.sha256(text.encode()).hexdigest())
    return item
