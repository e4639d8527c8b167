"""`iceberg`: Iceberg tables in a per-item local warehouse, read through DuckDB views.

Per item `<workdir>/<store id>/`: `iceberg.db`, a pyiceberg SQL catalog (SQLite-backed) whose
warehouse is `warehouse/`; each `<table>.parquet` of the dataset is written through pyiceberg
as table `main.<table>` (one append: one snapshot). `catalog.duckdb` holds the analyst's views
`CREATE VIEW <table> AS SELECT * FROM iceberg_scan('<metadata.json>')`, pinned to the
metadata file of that snapshot. The analyst's connection loads the `avro` and `iceberg`
extensions from their wheels, opens the catalog read-only, and may read files under
`warehouse/` only, with the configuration locked (as the other DuckDB backends).

Fingerprint (`ProvisionedViews.fingerprint`): logical over the views' rows; physical is the
sha256 of every file of the item (catalog database, metadata, manifests, data) together with
each table's current metadata location and snapshot id as the pyiceberg catalog reports them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq

from stores.base import Attachment, DatasetFiles, Store, StoreError, new_store_id
from stores.capabilities import StoreCapabilities
from stores.engine.common import quote_ident, quote_literal, remove_folder, tree_sha256
from stores.engine.extensions import load_extensions, open_guarded_with
from stores.engine.views import CATALOG, ProvisionedViews

__all__ = ["IcebergStore", "ProvisionedIceberg", "open_catalog", "snapshot_ids"]

NAMESPACE = "main"
WAREHOUSE = "warehouse"
TABLES = "tables"
ICEBERG_DB = "iceberg.db"
EXTENSIONS = ("avro", "iceberg")


def open_catalog(root: Path) -> Any:
    """The item's pyiceberg SQL catalog (imported only when this backend is used)."""
    try:
        from pyiceberg.catalog.sql import SqlCatalog
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise StoreError(
            "the iceberg store needs pyiceberg: run `uv add 'pyiceberg[sql-sqlite]'`"
        ) from exc
    return SqlCatalog(
        "backintel",
        uri=f"sqlite:///{root / ICEBERG_DB}",
        warehouse=f"file://{root / WAREHOUSE}",  # not as_uri(): its %-escapes reach file paths
    )


def _local_metadata(location: str) -> bytes:
    return Path(_metadata_path(location)).read_bytes()


def snapshot_ids(
    root: Path, read_metadata: Callable[[str], bytes] = _local_metadata
) -> dict[str, tuple[str, int | None]]:
    """Table -> (metadata location, current snapshot id), read from the catalog database
    (opened read-only) and the metadata file it points at (`read_metadata(location)`: a local
    file here, an object in the bucket for `iceberg-s3`)."""
    uri = f"{(root / ICEBERG_DB).as_uri()}?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as con:
            rows = con.execute(
                "SELECT table_name, metadata_location FROM iceberg_tables "
                "WHERE table_namespace = ? ORDER BY 1",
                (NAMESPACE,),
            ).fetchall()
        out: dict[str, tuple[str, int | None]] = {}
        for table, location in rows:
            snap = json.loads(read_metadata(str(location))).get("current-snapshot-id")
            out[str(table)] = (str(location), None if snap in (None, -1) else int(snap))
        return out
    except (sqlite3.Error, OSError, ValueError) as exc:
        raise StoreError(f"iceberg store: cannot read the catalog under {root}: {exc}") from exc


class ProvisionedIceberg(ProvisionedViews):
    """A warehouse, its catalog and the analyst's view catalog."""

    @property
    def mount_path(self) -> Path | None:
        """`tables/`: each table's one Iceberg data file, hard-linked as `<table>.parquet`, for
        a sandbox to read (None when a table spans several data files)."""
        tables = self.root / TABLES
        return tables if tables.is_dir() else None

    def attachment(self) -> Attachment | None:
        warehouse = (self.root / WAREHOUSE,)
        return Attachment(
            str(self.root / CATALOG), "duckdb", "main", warehouse, ("avro", "iceberg")
        )

    def _open(self) -> duckdb.DuckDBPyConnection:
        return open_guarded_with(
            self.root / CATALOG, extensions=EXTENSIONS, allowed_dirs=[self.root / WAREHOUSE]
        )

    def _physical(self) -> str:
        physical = hashlib.sha256(tree_sha256(self.root).encode())
        physical.update(json.dumps(snapshot_ids(self.root), sort_keys=True).encode())
        return physical.hexdigest()


def _metadata_path(location: str) -> str:
    return location.removeprefix("file://")


class IcebergStore(Store):
    """Each item gets its own warehouse written through pyiceberg."""

    name = "iceberg"
    capabilities = StoreCapabilities(dialect="duckdb", reads_sqlite_file=False)

    def provision(self, dataset: DatasetFiles) -> ProvisionedIceberg:
        store_id = new_store_id()
        root = self.workdir / store_id
        try:
            (root / WAREHOUSE).mkdir(parents=True)
            catalog = open_catalog(root)
            try:
                catalog.create_namespace(NAMESPACE)
                views: dict[str, str] = {}
                for path in sorted(dataset.parquet_dir.glob("*.parquet")):
                    data = pq.read_table(path)
                    table = catalog.create_table((NAMESPACE, path.stem), schema=data.schema)
                    if data.num_rows:
                        table.append(data)
                        table = catalog.load_table((NAMESPACE, path.stem))
                    meta = quote_literal(_metadata_path(str(table.metadata_location)))
                    views[path.stem] = f"SELECT * FROM iceberg_scan({meta})"
            finally:
                catalog.engine.dispose()
            _build_views(root / CATALOG, views)
            _link_data_files(root, sorted(views))
            for path in root.rglob("*"):
                if path.is_file():
                    path.chmod(0o444)
        except Exception as exc:
            remove_folder(root)
            if isinstance(exc, StoreError):
                raise
            raise StoreError(f"iceberg store: provisioning {store_id} failed: {exc}") from exc
        return ProvisionedIceberg(self.name, store_id, root, self.statement_timeout_s)


def _link_data_files(root: Path, tables: list[str]) -> None:
    """Hard-link each table's single data file as `tables/<table>.parquet` (see mount_path)."""
    links: dict[str, Path] = {}
    for table in tables:
        files = sorted((root / WAREHOUSE / NAMESPACE / table / "data").glob("*.parquet"))
        if len(files) != 1:
            return
        links[table] = files[0]
    (root / TABLES).mkdir()
    for table, target in links.items():
        os.link(target, root / TABLES / f"{table}.parquet")


def _build_views(db_path: Path, views: dict[str, str]) -> None:
    """A DuckDB file of views over `iceberg_scan` (the extension must be loaded to create them)."""
    conn = duckdb.connect(
        str(db_path),
        config={"autoload_known_extensions": "false", "autoinstall_known_extensions": "false"},
    )
    try:
        load_extensions(conn, EXTENSIONS)
        for name, select in sorted(views.items()):
            conn.execute(f"CREATE VIEW {quote_ident(name)} AS {select}")
        conn.execute("CHECKPOINT")
    finally:
        conn.close()
