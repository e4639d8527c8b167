"""Open the item's store from code running inside the sandbox (shipped there; stdlib imports).

    import backintel_store as bs
    con = bs.connect()            # sqlite3, read-only (SQLite stores)
    db = bs.duckdb()              # duckdb with the store attached read-only as `store`
    df = bs.table("orders")       # one table as a polars DataFrame
    bs.tables()                   # table names

The store is mounted read-only at $BACKINTEL_STORE (`/data/store/<name>` in bwrap and docker).
A SQLite file, a DuckDB file, or a folder of `<table>.parquet` files are understood.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

__all__ = ["connect", "duckdb", "kind", "store_path", "table", "tables"]

_SQLITE_MAGIC = b"SQLite format 3\x00"
_DUCKDB_MAGIC = b"DUCK"


def store_path() -> Path:
    """The mounted store; an error when this sandbox has none."""
    value = os.environ.get("BACKINTEL_STORE")
    if not value:
        raise RuntimeError("no store is mounted in this sandbox ($BACKINTEL_STORE is not set)")
    return Path(value)


def _data_files(folder: Path) -> dict[str, Path]:
    """Tables of a folder store by name: `<table>.parquet`, `.csv` or `.json` (NDJSON)."""
    files = {}
    for file in sorted(folder.iterdir()):
        if file.suffix in {".parquet", ".csv", ".json"} and not file.stem.startswith("_"):
            files[file.stem] = file
    return files


def kind() -> str:
    """'sqlite', 'duckdb', 'parquet' (a folder of <table>.parquet files) or 'files' (a folder
    of CSV and newline-delimited JSON files)."""
    path = store_path()
    if path.is_dir():
        suffixes = {f.suffix for f in _data_files(path).values()}
        return "parquet" if suffixes <= {".parquet"} else "files"
    with path.open("rb") as fh:
        head = fh.read(16)
    if head == _SQLITE_MAGIC:
        return "sqlite"
    if head[8:12] == _DUCKDB_MAGIC:
        return "duckdb"
    raise RuntimeError(f"{path} is neither a SQLite nor a DuckDB file nor a parquet folder")


def connect() -> sqlite3.Connection:
    """A read-only sqlite3 connection (mode=ro) to a SQLite store."""
    if kind() != "sqlite":
        raise RuntimeError(f"connect() is for SQLite stores; this one is {kind()}: use duckdb()")
    return sqlite3.connect(f"file:{store_path()}?mode=ro", uri=True)


def _sqlite_extension() -> str:
    import importlib.util

    spec = importlib.util.find_spec("duckdb_extension_sqlite_scanner")
    if spec is None or spec.origin is None:
        raise RuntimeError("the duckdb-extension-sqlite-scanner wheel is not installed")
    found = sorted(Path(spec.origin).parent.glob("extensions/*/sqlite_scanner.duckdb_extension"))
    if not found:
        raise RuntimeError("the duckdb sqlite_scanner extension wheel has no extension file")
    return str(found[-1])


def duckdb() -> Any:
    """An in-memory DuckDB connection with the store attached read-only as `store` (and USEd).

    Extensions load only from installed wheels; nothing is downloaded.
    """
    import duckdb as _duckdb

    threads = os.environ.get("BACKINTEL_THREADS", "2")
    con = _duckdb.connect(
        config={
            "threads": threads,
            "autoinstall_known_extensions": "false",
            "autoload_known_extensions": "false",
            # The signature check hashes the 34 MB sqlite extension on one thread per MiB, which
            # alone would exceed the sandbox's process limit; the file comes from the read-only,
            # lock-hashed wheel, so it is loaded without that check.
            "allow_unsigned_extensions": "true",
            "home_directory": os.environ.get("TMPDIR", "/tmp"),
        }
    )
    path, what = store_path(), kind()
    quoted = str(path).replace("'", "''")
    if what == "sqlite":
        con.load_extension(_sqlite_extension())
        con.execute(f"ATTACH '{quoted}' AS store (TYPE sqlite, READ_ONLY)")
        con.execute("USE store")
    elif what == "duckdb":
        con.execute(f"ATTACH '{quoted}' AS store (READ_ONLY)")
        con.execute("USE store")
    else:
        readers = {".parquet": "read_parquet", ".csv": "read_csv", ".json": "read_json"}
        scope_file = path / "_out_of_scope.txt"  # tables the scenario forbids: no view opens them
        skipped = set(scope_file.read_text().split()) if scope_file.is_file() else set()
        for name, file in _data_files(path).items():
            if name in skipped:
                continue
            src = str(file).replace("'", "''")
            view = name.replace('"', '""')
            reader = readers[file.suffix]
            con.execute(f"CREATE VIEW \"{view}\" AS SELECT * FROM {reader}('{src}')")
    return con


def tables() -> list[str]:
    """The store's table names, sorted."""
    if kind() == "sqlite":
        with connect() as con:
            rows = con.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table','view') "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            ).fetchall()
        return [r[0] for r in rows]
    if kind() in {"parquet", "files"}:
        return sorted(_data_files(store_path()))
    return sorted(r[0] for r in duckdb().execute("SHOW TABLES").fetchall())


def table(name: str) -> Any:
    """One whole table as a polars DataFrame."""
    import polars as pl

    if name not in tables():
        raise KeyError(f"no table {name!r} in the store; tables: {', '.join(tables())}")
    if kind() in {"parquet", "files"}:
        file = _data_files(store_path())[name]
        if file.suffix == ".parquet":
            return pl.read_parquet(file)
        if file.suffix == ".json":
            return pl.read_ndjson(file, infer_schema_length=None)
        return pl.read_csv(file, null_values=["\\N"], infer_schema_length=None)
    if kind() == "sqlite":
        with connect() as con:
            cur = con.execute(f'SELECT * FROM "{name.replace(chr(34), chr(34) * 2)}"')
            columns = [d[0] for d in cur.description]
            return pl.DataFrame(
                cur.fetchall(), schema=columns, orient="row", infer_schema_length=None
            )
    return duckdb().execute(f'SELECT * FROM "{name.replace(chr(34), chr(34) * 2)}"').pl()
