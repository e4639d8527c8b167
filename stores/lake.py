"""`lake-parquet`: per item a folder copy of the Parquet files, queried as DuckDB views.

Layout of one item: `<workdir>/<store id>/data/<table>.parquet` (copies, mode 0444) and
`<workdir>/<store id>/catalog.duckdb`, a database holding only views
`CREATE VIEW t AS SELECT * FROM read_parquet('<abs path>')`. The analyst opens the catalog
read-only with external file access limited to `data/` (`allowed_directories`) and the
configuration locked, so the views resolve but no other file can be read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import duckdb

from stores._duckdb_common import (
    FolderItem,
    copy_folder,
    open_guarded,
    quote_ident,
    quote_literal,
    remove_folder,
    template_dir,
)
from stores.base import DatasetFiles, Store, StoreError, new_store_id

__all__ = ["LakeParquetStore", "ProvisionedViews", "build_view_catalog"]

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


def _copy_parquet(parquet_dir: Path) -> Callable[[Path], None]:
    def build(target: Path) -> None:
        for path in sorted(parquet_dir.glob("*.parquet")):
            (target / path.name).write_bytes(path.read_bytes())

    return build


class LakeParquetStore(Store):
    """Parquet files in a per-item folder, exposed as views."""

    name = "lake-parquet"
    dialect = "duckdb"

    def provision(self, dataset: DatasetFiles) -> ProvisionedViews:
        template = template_dir(
            self.workdir, dataset.parquet_dir, "lake-parquet", _copy_parquet(dataset.parquet_dir)
        )

        def view_for(path: Path) -> str | None:
            if path.suffix != ".parquet":
                return None
            return f"SELECT * FROM read_parquet({quote_literal(str(path.resolve()))})"

        return provision_views(self, template, view_for)
