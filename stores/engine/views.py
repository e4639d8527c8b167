"""A folder of data files and a read-only DuckDB catalog of views over them: the item of the
lake-parquet, files and iceberg stores, and the catalog a DuckDB source's probe reads."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import duckdb

from stores.base import Attachment, Store, StoreError, new_store_id
from stores.engine.common import FolderItem, copy_folder, open_guarded, quote_ident, remove_folder

__all__ = ["CATALOG", "DATA", "ProvisionedViews", "build_view_catalog", "provision_views"]


CATALOG = "catalog.duckdb"


DATA = "data"


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
    return ProvisionedViews(store.name, store_id, root, store.statement_timeout_s)
