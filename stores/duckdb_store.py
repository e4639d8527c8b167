"""`duckdb`: a DuckDB database file per item, opened read-only for the analyst.

The database is built once per session and dataset from the Parquet files (under a file lock,
so xdist workers share it) and copied per item into `<workdir>/<store id>/store.duckdb`.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from stores._duckdb_common import (
    DuckDBSession,
    cached_fingerprint,
    copy_folder,
    open_guarded,
    quote_ident,
    quote_literal,
    remove_folder,
    template_dir,
    tree_sha256,
)
from stores.base import DatasetFiles, Fingerprint, ProvisionedStore, Store, StoreError, new_store_id

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


class ProvisionedDuckDB(ProvisionedStore):
    backend = "duckdb"

    def __init__(self, store_id: str, folder: Path, timeout_s: float) -> None:
        self.store_id = store_id
        self.folder = folder
        self._timeout_s = timeout_s

    @property
    def mount_path(self) -> Path | None:
        return self.folder / DB_NAME

    def engine_connection(self) -> duckdb.DuckDBPyConnection:
        """The guarded DuckDB connection alone, without the statement check (tests use it to
        show the engine guard holds by itself)."""
        if not self.folder.is_dir():
            raise StoreError(f"{self.display_id} was torn down; provision a new store")
        return open_guarded(self.folder / DB_NAME)

    def connect(self) -> DuckDBSession:
        conn = self.engine_connection()
        return DuckDBSession(conn, timeout_s=self._timeout_s, where=self.display_id)

    def fingerprint(self) -> Fingerprint:
        """Physical: sha256 of the folder's files; logical: computed in DuckDB, cached per
        physical hash (`cached_fingerprint`)."""
        if not self.folder.is_dir():
            raise StoreError(f"{self.display_id} was torn down; provision a new store")
        return cached_fingerprint(
            self.folder, lambda: tree_sha256(self.folder), self.engine_connection, self.display_id
        )

    def teardown(self) -> None:
        remove_folder(self.folder)


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
        return ProvisionedDuckDB(store_id, folder, self.statement_timeout_s)
