"""A user's DuckDB file, Parquet folder or CSV folder as DuckDB reads it in place: the files
it is made of, the views over a folder's files, and connections opened read-only on it with
external access limited to what the source allows."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from stores.base import StoreError
from stores.engine.common import BASE_CONFIG, quote_ident, quote_literal

__all__ = ["FINGERPRINT_MEMORY", "DuckDBSource", "lock_down", "open_attached", "open_source"]

DB_NAME = "store.duckdb"
DATA = "data"
SCHEMA = "_schema.json"


def _columns_literal(columns: dict[str, str]) -> str:
    return (
        "{" + ", ".join(f"{quote_literal(k)}: {quote_literal(v)}" for k, v in columns.items()) + "}"
    )


class DuckDBSource:
    """One source as DuckDB reads it: a DuckDB file (`duckdb`) or a folder of `<table>.parquet`
    or `<table>.csv` files (`parquet`, `csv`; a CSV folder's `_schema.json` pins its types)."""

    def __init__(self, kind: str, location: Path) -> None:
        self.kind = kind
        self.location = location.resolve()

    def files(self) -> list[Path]:
        """The files the source is made of, in name order: what its signature covers."""
        if self.kind == "duckdb":
            wal = self.location.with_name(self.location.name + ".wal")
            return [self.location, *([wal] if wal.is_file() else [])]
        return sorted(
            p for p in self.location.iterdir() if p.is_file() and not p.name.startswith(".")
        )

    def allowed(self) -> list[Path]:
        """The folders a connection reading the source must be allowed to read."""
        return [] if self.kind == "duckdb" else [self.location]

    def selects(self, folder: Path) -> dict[str, str]:
        """Table -> the SELECT reading it from `folder` (the source folder or a link to it)."""
        if self.kind == "duckdb":
            return {}
        pinned = self.location / SCHEMA
        schema: dict[str, dict[str, str]] = (
            json.loads(pinned.read_text()) if self.kind == "csv" and pinned.is_file() else {}
        )
        out = {}
        for path in sorted(self.location.glob(f"*.{self.kind}")):
            where = quote_literal(str(folder / path.name))
            if self.kind == "parquet":
                out[path.stem] = f"SELECT * FROM read_parquet({where})"
            elif (columns := schema.get(path.stem)) is None:
                out[path.stem] = (
                    f"SELECT * FROM read_csv({where}, header = true, auto_detect = true)"
                )
            else:
                out[path.stem] = (
                    f"SELECT * FROM read_csv({where}, header = true, auto_detect = false, "
                    f"columns = {_columns_literal(columns)})"
                )
        return out

    def attach(self, conn: duckdb.DuckDBPyConnection, alias: str) -> None:
        """Make the source's tables readable on `conn` as `<alias>.<table>`: the DuckDB file
        attached read-only under `alias`, or a schema `alias` of views over the folder."""
        if self.kind == "duckdb":
            where = quote_literal(str(self.location))
            conn.execute(f"ATTACH {where} AS {quote_ident(alias)} (READ_ONLY)")
            return
        conn.execute(f"CREATE SCHEMA {quote_ident(alias)}")
        for table, select in self.selects(self.location).items():
            conn.execute(f"CREATE VIEW {quote_ident(alias)}.{quote_ident(table)} AS {select}")


FINGERPRINT_MEMORY = "128MB"
"""DuckDB's memory while it fingerprints a source (a streamed aggregate; its buffer pool would
otherwise keep up to `BASE_CONFIG`'s 1 GB of the source's pages in the harness)."""


def open_source(source: DuckDBSource, memory_limit: str) -> duckdb.DuckDBPyConnection:
    """An in-memory connection of the harness's own where the source's tables are the default
    database's `main` (the DuckDB file attached read-only as `store`, or views over the
    folder), DuckDB's memory capped at `memory_limit`, locked down."""
    conn = duckdb.connect(config={**BASE_CONFIG, "memory_limit": memory_limit})
    try:
        if source.kind == "duckdb":
            where = quote_literal(str(source.location))
            conn.execute(f"ATTACH {where} AS store (READ_ONLY)")
            conn.execute("USE store")
        else:
            for table, select in source.selects(source.location).items():
                conn.execute(f"CREATE VIEW main.{quote_ident(table)} AS {select}")
        lock_down(conn, source.allowed())
    except duckdb.Error as exc:
        conn.close()
        raise StoreError(f"cannot read the source at {source.location}: {exc}") from exc
    return conn


def lock_down(conn: duckdb.DuckDBPyConnection, allowed: list[Path]) -> None:
    """External access off (but under `allowed`), no spill files, the configuration locked."""
    if allowed:
        dirs = ", ".join(quote_literal(str(d).rstrip("/") + "/") for d in allowed)
        conn.execute(f"SET allowed_directories = [{dirs}]")
    conn.execute("SET temp_directory = ''")
    conn.execute("SET enable_external_access = false")
    conn.execute("SET lock_configuration = true")


def open_attached(db_path: Path, alias: str = "store") -> duckdb.DuckDBPyConnection:
    """The DuckDB file `db_path` attached read-only as `alias` (the default database: its
    tables are `main` there), external access off, configuration locked."""
    conn = duckdb.connect(config=dict(BASE_CONFIG))
    try:
        conn.execute(f"ATTACH {quote_literal(str(db_path))} AS {quote_ident(alias)} (READ_ONLY)")
        conn.execute(f"USE {quote_ident(alias)}")
        lock_down(conn, [])
    except duckdb.Error as exc:
        conn.close()
        raise StoreError(f"cannot open DuckDB store {db_path}: {exc}") from exc
    return conn
