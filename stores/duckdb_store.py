"""`duckdb`: a DuckDB database file per item, opened read-only for the analyst.

The database is built once per session and dataset from the Parquet files (under a file lock,
so xdist workers share it) and copied per item into `<workdir>/<store id>/store.duckdb`.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from stores._duckdb_common import (
    FolderItem,
    copy_folder,
    open_guarded,
    quote_ident,
    quote_literal,
    template_dir,
)
from stores.base import DatasetFiles, Store, new_store_id

__all__ = ["DuckDBStore", "ProvisionedDuckDB"]

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

    def _open(self) -> duckdb.DuckDBPyConnection:
        return open_guarded(self.root / DB_NAME)


class DuckDBStore(Store):
    """DuckDB database files built from Parquet, one copy per item."""

    name = "duckdb"
    dialect = "duckdb"

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
