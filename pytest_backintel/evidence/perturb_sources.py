"""Perturbed copies of a user's own SQLite file in its own form, so evidence over data of your
own must follow the data like evidence over a built world. A source served in place is probed
through views instead, with no copy (its store's `view_probe_kind`: `stores/<backend>/
perturb_views.py` for SQLite, DuckDB files, Parquet and CSV folders, PostgreSQL, ClickHouse);
this module's copies remain for a SQLite file served by the copying `sqlite` backend
(`--store` on a built world's file).

The rows to drop and the values to scale are chosen by `perturb.perturb_tables` (the same
transformation as for Parquet datasets); what differs is only how tables are read and written:

- a SQLite file is copied and each table's rows are replaced in the copy, so every type,
  constraint, index and view stays as in the source.

A file copy is built once per source and salt under the cache folder, named by the source's
data hash (a changed source gets a new copy).
A table polars cannot hold in a frame (a column of mixed types) is kept as it is.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import polars as pl

from pytest_backintel.evidence.perturb import FILE_FORMS, perturb_tables, source_form
from stores.base import DatasetFiles
from stores.common.schema_keys import DeclaredKeys, sqlite_declared_keys
from stores.common.view_plan import PERTURB_VERSION, build_once, write_done

__all__ = ["FILE_FORMS", "perturb_source", "source_form"]


def _frames(
    read: Callable[[str], pl.DataFrame], tables: list[str], notes: list[str]
) -> dict[str, pl.DataFrame]:
    """Each table as a frame; a table polars cannot hold (mixed types) is left out, unchanged,
    and named in `notes`."""
    frames: dict[str, pl.DataFrame] = {}
    for table in tables:
        try:
            frames[table] = read(table)
        except (pl.exceptions.PolarsError, ValueError, TypeError, OverflowError) as exc:
            why = f"its values cannot be read as one type per column ({type(exc).__name__})"
            notes.append(f"table {table!r} is kept as it is: {why}; nothing in it changes")
    return frames


def _perturbed(
    frames: dict[str, pl.DataFrame],
    salt: int,
    keys: DeclaredKeys,
    notes: list[str],
    moving: tuple[str, ...] | None,
) -> dict[str, pl.DataFrame]:
    """`perturb_tables` with the source's declared keys (`evidence.perturb`)."""
    return perturb_tables(frames, salt, keys, notes, moving)


_SQLITE_NUMERIC = ("REAL", "FLOA", "DOUB", "NUM", "DEC")
"""Declared types with REAL or NUMERIC affinity (SQLite's rules), read as floats: a DECIMAL
column whose values happen to be whole is stored as INTEGER and would not be rescaled."""


def _sqlite_frame(con: sqlite3.Connection, table: str) -> pl.DataFrame:
    cur = con.execute(f"SELECT * FROM {_q(table)}")
    cols = [d[0] for d in cur.description]
    df = pl.DataFrame(cur.fetchall(), schema=cols, orient="row", infer_schema_length=None)
    declared = {
        str(r[1]): str(r[2]).upper() for r in con.execute(f"PRAGMA table_info({_q(table)})")
    }
    numeric = [
        c
        for c in cols
        if any(k in declared.get(c, "") for k in _SQLITE_NUMERIC)
        and "INT" not in declared.get(c, "")
        and df.schema[c].is_integer()
    ]
    return df.with_columns(pl.col(c).cast(pl.Float64) for c in numeric) if numeric else df


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sqlite(src: Path, dst: Path, salt: int, moving: tuple[str, ...] | None) -> list[str]:
    source = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    con = sqlite3.connect(dst)
    try:
        source.backup(con)  # a consistent copy, a WAL file's pages included
    finally:
        source.close()
    notes: list[str] = []
    try:
        tables = [
            r[0]
            for r in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        frames = _frames(lambda t: _sqlite_frame(con, t), tables, notes)
        keys = sqlite_declared_keys(con, tables)
        con.execute("PRAGMA foreign_keys = OFF")
        with con:
            for table, df in _perturbed(frames, salt, keys, notes, moving).items():
                cols = ", ".join(_q(c) for c in df.columns)
                marks = ", ".join("?" * len(df.columns))
                con.execute(f"DELETE FROM {_q(table)}")
                con.executemany(f"INSERT INTO {_q(table)} ({cols}) VALUES ({marks})", df.rows())
        con.execute("VACUUM")
    finally:
        con.close()
    return notes


_BUILDERS: dict[str, Callable[[Path, Path, int, tuple[str, ...] | None], list[str]]] = {
    "sqlite": _sqlite,
}


def _source_path(files: DatasetFiles, form: str) -> Path:
    if form == "sqlite":
        assert files.sqlite_path is not None
        return files.sqlite_path
    return files.extra[form]


def _as_files(files: DatasetFiles, form: str, built: Path) -> DatasetFiles:
    if form == "sqlite":
        return DatasetFiles(files.name, parquet_dir=built, sqlite_path=built)
    return DatasetFiles(files.name, parquet_dir=built, extra={form: built})


def perturb_source(
    files: DatasetFiles,
    form: str,
    cache_dir: Path,
    salt: int,
    data_hash: str,
    moving: tuple[str, ...] | None = None,
) -> DatasetFiles:
    """The perturbed copy of a SQLite/DuckDB file or CSV folder, built on first use under
    `cache_dir` and reused while the source's data hash is the same (xdist-safe); `moving`
    as in `perturb_tables`."""
    src = _source_path(files, form)
    suffix = "" if form == "csv" else src.suffix
    tag = "m" if moving is not None else "s"
    final = cache_dir / f"{files.name}-{form}-v{PERTURB_VERSION}-{tag}{salt}-{data_hash[:16]}"
    built = final / f"data{suffix}"

    def build(tmp: Path) -> None:
        notes = _BUILDERS[form](src, tmp / built.name, salt, moving)
        write_done(tmp, str(src), salt, notes)

    build_once(cache_dir, final, build)
    return _as_files(files, form, built)
