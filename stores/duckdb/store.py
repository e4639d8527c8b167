"""`duckdb`: a DuckDB database file per item, opened read-only for the analyst.

The database is built once per session and dataset from the Parquet files (under a file lock,
so xdist workers share it) and copied per item into `<workdir>/<store id>/store.duckdb`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb

from stores.base import Attachment, DatasetFiles, Store, StoreError, new_store_id
from stores.capabilities import StoreCapabilities
from stores.engine.common import (
    FolderItem,
    copy_folder,
    open_guarded,
    quote_ident,
    quote_literal,
    template_dir,
)

__all__ = ["DuckDBFileStore", "DuckDBStore", "ProvisionedDuckDB"]

DB_NAME = "store.duckdb"


def build_database(parquet_dir: Path, target: Path) -> None:
    """Write `target/store.duckdb` with one table per `<table>.parquet` in `parquet_dir`."""
    conn = duckdb.connect(str(target / DB_NAME), config={"autoload_known_extensions": "false"})
    try:
        for path in sorted(parquet_dir.glob("*.parquet")):
            conn.execute(
                f"CREATE TABLE {quote_ident(path.stem)} AS "
                f"SELECT * FROM read_parquet({quote_literal(str(path.resolve()))})"
            )
        conn.execute("CHECKPOINT")
    finally:
        conn.close()


class ProvisionedDuckDB(FolderItem):
    """An item folder holding one read-only DuckDB database file."""

    @property
    def mount_path(self) -> Path | None:
        return self.root / DB_NAME

    def attachment(self) -> Attachment | None:
        return Attachment(str(self.root / DB_NAME), "duckdb", "main", (self.root,))

    def _open(self) -> duckdb.DuckDBPyConnection:
        return open_guarded(self.root / DB_NAME)


class DuckDBStore(Store):
    """DuckDB database files built from Parquet, one copy per item."""

    name = "duckdb"
    capabilities = StoreCapabilities(
        sandbox_mount="file", dialect="duckdb", reads_sqlite_file=False
    )

    def provision(self, dataset: DatasetFiles) -> ProvisionedDuckDB:
        template = template_dir(
            self.workdir,
            dataset.parquet_dir,
            "duckdb",
            lambda d: build_database(dataset.parquet_dir, d),
        )
        store_id = new_store_id()
        folder = self.workdir / store_id
        copy_folder(template, folder)
        return ProvisionedDuckDB("duckdb", store_id, folder, self.statement_timeout_s)


class DuckDBFileStore(DuckDBStore):
    """A user's own DuckDB database file (`dataset.extra["duckdb"]`), copied as is per item:
    tables, types and constraints exactly as in the source."""

    def provision(self, dataset: DatasetFiles) -> ProvisionedDuckDB:
        source = dataset.extra.get("duckdb")
        if source is None or not source.is_file():
            raise StoreError(f"dataset {dataset.name!r}: no DuckDB file at {source}")
        store_id = new_store_id()
        folder = self.workdir / store_id
        folder.mkdir(parents=True)
        for src, name in ((source, DB_NAME), (source.with_name(source.name + ".wal"), "")):
            if name or src.is_file():
                target = folder / (name or f"{DB_NAME}.wal")
                shutil.copyfile(src, target)
                target.chmod(0o444)
        return ProvisionedDuckDB("duckdb", store_id, folder, self.statement_timeout_s)
