"""`files` (CSV per table) and `files-mixed` (CSV and newline-delimited JSON), as DuckDB views.

The CSV/JSON files are written once per session and dataset from the Parquet (under a file
lock) together with `_schema.json`, the Parquet column types. Each item gets a copy, and its
views read the files with those explicit types (`read_csv(..., columns=..., auto_detect=false)`,
`read_json(..., columns=...)`), so dates, timestamps and decimals come back typed exactly as from
the other backends, not as strings. CSV cells are written quoted with `\\N` for NULL and read
with `allow_quoted_nulls=false`, so an empty string and NULL stay distinct.
`files-mixed` writes every second table (in name order: the 2nd, 4th, ...) as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import duckdb

from stores.base import DatasetFiles, Store, StoreError
from stores.capabilities import StoreCapabilities
from stores.engine.common import quote_literal, template_dir
from stores.engine.views import ProvisionedViews, provision_views

__all__ = ["CsvFolderStore", "FilesMixedStore", "FilesStore"]

SCHEMA = "_schema.json"


def _write_files(parquet_dir: Path, json_every_second: bool) -> Callable[[Path], None]:
    def build(target: Path) -> None:
        conn = duckdb.connect(config={"autoload_known_extensions": "false"})
        schema: dict[str, dict[str, str]] = {}
        try:
            for i, path in enumerate(sorted(parquet_dir.glob("*.parquet"))):
                source = f"read_parquet({quote_literal(str(path.resolve()))})"
                described = conn.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()
                schema[path.stem] = {str(r[0]): str(r[1]) for r in described}
                if json_every_second and i % 2 == 1:
                    out, options = target / f"{path.stem}.json", "FORMAT json"
                else:
                    out, options = (
                        target / f"{path.stem}.csv",
                        "HEADER, NULLSTR '\\N', FORCE_QUOTE *",
                    )
                conn.execute(
                    f"COPY (SELECT * FROM {source}) TO {quote_literal(str(out))} ({options})"
                )
        finally:
            conn.close()
        (target / SCHEMA).write_text(json.dumps(schema, indent=1))

    return build


def _columns_literal(columns: dict[str, str]) -> str:
    return (
        "{" + ", ".join(f"{quote_literal(k)}: {quote_literal(v)}" for k, v in columns.items()) + "}"
    )


def _provision(store: Store, dataset: DatasetFiles, json_every_second: bool) -> ProvisionedViews:
    template = template_dir(
        store.workdir,
        dataset.parquet_dir,
        store.name,
        _write_files(dataset.parquet_dir, json_every_second),
    )
    schema: dict[str, dict[str, str]] = json.loads((template / SCHEMA).read_text())

    def view_for(path: Path) -> str | None:
        columns = schema.get(path.stem)
        if columns is None:
            return None
        where, cols = quote_literal(str(path.resolve())), _columns_literal(columns)
        if path.suffix == ".csv":
            return (
                f"SELECT * FROM read_csv({where}, header = true, columns = {cols}, "
                "auto_detect = false, nullstr = '\\N', allow_quoted_nulls = false)"
            )
        if path.suffix == ".json":
            return (
                f"SELECT * FROM read_json({where}, format = 'newline_delimited', columns = {cols})"
            )
        return None

    return provision_views(store, template, view_for)


class FilesStore(Store):
    """One CSV file per table."""

    name = "files"
    capabilities = StoreCapabilities(dialect="duckdb", reads_sqlite_file=False)

    def provision(self, dataset: DatasetFiles) -> ProvisionedViews:
        return _provision(self, dataset, json_every_second=False)


class FilesMixedStore(Store):
    """CSV for the 1st, 3rd, ... table by name, newline-delimited JSON for the others."""

    name = "files-mixed"
    capabilities = StoreCapabilities(dialect="duckdb", reads_sqlite_file=False)

    def provision(self, dataset: DatasetFiles) -> ProvisionedViews:
        return _provision(self, dataset, json_every_second=True)


class CsvFolderStore(Store):
    """A user's own folder of `<table>.csv` files (`dataset.extra["csv"]`), copied per item and
    read as views: column types pinned by `_schema.json` in the folder (as `files` writes it)
    when present, else detected by DuckDB."""

    name = "files"
    capabilities = StoreCapabilities(dialect="duckdb", reads_sqlite_file=False)

    def provision(self, dataset: DatasetFiles) -> ProvisionedViews:
        folder = dataset.extra.get("csv")
        if folder is None or not any(folder.glob("*.csv")):
            raise StoreError(f"dataset {dataset.name!r}: no *.csv files in {folder}")
        pinned = folder / SCHEMA
        schema: dict[str, dict[str, str]] = (
            json.loads(pinned.read_text()) if pinned.is_file() else {}
        )

        def view_for(path: Path) -> str | None:
            if path.suffix != ".csv":
                return None
            where = quote_literal(str(path.resolve()))
            columns = schema.get(path.stem)
            if columns is None:
                return f"SELECT * FROM read_csv({where}, header = true, auto_detect = true)"
            return (
                f"SELECT * FROM read_csv({where}, header = true, auto_detect = false, "
                f"columns = {_columns_literal(columns)})"
            )

        return provision_views(self, folder, view_for)
