"""Perturbed copies of a user's own source (SQLite, DuckDB, CSV, PostgreSQL) in its own form,
so evidence over data of your own must follow the data like evidence over a built world.

The rows to drop and the values to scale are chosen by `perturb.perturb_tables` (the same
transformation as for Parquet datasets); what differs is only how tables are read and written:

- a SQLite or DuckDB file is copied and each table's rows are replaced in the copy, so every
  type, constraint, index and view stays as in the source;
- a CSV folder is read as the `files` store reads it (DuckDB's detection, or the folder's own
  `_schema.json`) and written back with those types pinned in `_schema.json`;
- a PostgreSQL source is perturbed in place in the item's own clone (`perturb_postgres`).

A file copy is built once per source and salt under the cache folder, named by the source's
data hash (a changed source gets a new copy); a PostgreSQL copy lives for the session.
A table polars cannot hold in a frame (a column of mixed types) is kept as it is.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from pytest_backintel.evidence.perturb import (
    DONE_FILE,
    FILE_FORMS,
    PERTURB_VERSION,
    build_once,
    perturb_tables,
    source_form,
)
from stores.base import DatasetFiles

__all__ = ["FILE_FORMS", "perturb_postgres", "perturb_source", "source_form"]

_SCHEMA = "_schema.json"


def _frames(read: Callable[[str], pl.DataFrame], tables: list[str]) -> dict[str, pl.DataFrame]:
    """Each table as a frame; a table polars cannot hold (mixed types) is left out, unchanged."""
    frames: dict[str, pl.DataFrame] = {}
    for table in tables:
        try:
            frames[table] = read(table)
        except (pl.exceptions.PolarsError, ValueError, TypeError, OverflowError):
            continue
    return frames


ForeignKey = tuple[str, list[str], str, list[str]]
"""(table, columns, referenced table, referenced columns), as the source declares it."""


def _foreign_keys(rows: list[tuple[Any, ...]]) -> list[ForeignKey]:
    return [(t, list(c), p, list(pc)) for t, c, p, pc in rows]


def _without_orphans(
    frames: dict[str, pl.DataFrame], fks: list[ForeignKey]
) -> dict[str, pl.DataFrame]:
    """Rows whose declared foreign key points at a dropped row are dropped too (to a
    fixpoint), so the copy keeps the source's constraints."""
    changed = True
    while changed:
        changed = False
        for table, cols, parent, pcols in fks:
            if table not in frames or parent not in frames:
                continue
            child = frames[table].with_row_index("__backintel_row")
            keys = frames[parent].select(pcols).unique()
            keys = keys.rename(dict(zip(pcols, cols, strict=True)))
            keys = keys.cast({c: child.schema[c] for c in cols})
            nulls = pl.any_horizontal([pl.col(c).is_null() for c in cols])
            ok = child.filter(~nulls).join(keys, on=cols, how="semi")["__backintel_row"]
            kept = child.filter(nulls | pl.col("__backintel_row").is_in(ok.implode()))
            if kept.height < child.height:
                frames[table], changed = kept.drop("__backintel_row"), True
    return frames


def _perturbed(
    frames: dict[str, pl.DataFrame], salt: int, fks: list[ForeignKey] | None = None
) -> dict[str, pl.DataFrame]:
    """`perturb_tables` without orphans, and DECIMAL columns (money in a user's database)
    scaled the same way and cast back to their own precision; a value the precision cannot
    hold is kept."""
    out = _without_orphans(perturb_tables(frames, salt), fks or [])
    n = 0
    for table in sorted(out):
        df = out[table]
        scaled = []
        for col, dtype in df.schema.items():
            if isinstance(dtype, pl.Decimal):
                n += 1
                index = pl.int_range(pl.len(), dtype=pl.Int64)
                step = (index * 2654435761 + n * 131 + salt * 7919) % 8 + 1
                value = pl.col(col).cast(pl.Float64) * (1 + step / 16)
                scaled.append(value.cast(dtype, strict=False).fill_null(pl.col(col)).alias(col))
        if scaled:
            out[table] = df.with_columns(scaled)
    return out


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sqlite(src: Path, dst: Path, salt: int) -> None:
    source = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    con = sqlite3.connect(dst)
    try:
        source.backup(con)  # a consistent copy, a WAL file's pages included
    finally:
        source.close()
    try:
        tables = [
            r[0]
            for r in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]

        def read(table: str) -> pl.DataFrame:
            cur = con.execute(f"SELECT * FROM {_q(table)}")
            cols = [d[0] for d in cur.description]
            return pl.DataFrame(cur.fetchall(), schema=cols, orient="row", infer_schema_length=None)

        frames = _frames(read, tables)
        con.execute("PRAGMA foreign_keys = OFF")
        with con:
            for table, df in _perturbed(frames, salt, _sqlite_fks(con, tables)).items():
                cols = ", ".join(_q(c) for c in df.columns)
                marks = ", ".join("?" * len(df.columns))
                con.execute(f"DELETE FROM {_q(table)}")
                con.executemany(f"INSERT INTO {_q(table)} ({cols}) VALUES ({marks})", df.rows())
        con.execute("VACUUM")
    finally:
        con.close()


def _sqlite_fks(con: sqlite3.Connection, tables: list[str]) -> list[ForeignKey]:
    by_id: dict[tuple[str, int], ForeignKey] = {}
    for table in tables:
        for fk_id, _seq, parent, col, pcol, *_ in con.execute(
            f"PRAGMA foreign_key_list({_q(table)})"
        ):
            _, cols, _, pcols = by_id.setdefault((table, fk_id), (table, [], parent, []))
            cols.append(col)
            pcols.append(pcol or col)
    return list(by_id.values())


def _duckdb(src: Path, dst: Path, salt: int) -> None:
    import duckdb

    shutil.copyfile(src, dst)
    if (wal := src.with_name(src.name + ".wal")).is_file():
        shutil.copyfile(wal, dst.with_name(dst.name + ".wal"))
    con = duckdb.connect(str(dst), config={"autoload_known_extensions": "false"})
    try:
        tables = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
                "AND table_type = 'BASE TABLE' ORDER BY 1"
            ).fetchall()
        ]
        frames = _frames(lambda t: con.execute(f"SELECT * FROM {_q(t)}").pl(), tables)
        fks = _foreign_keys(
            con.execute(
                "SELECT table_name, constraint_column_names, referenced_table, "
                "referenced_column_names FROM duckdb_constraints() "
                "WHERE constraint_type = 'FOREIGN KEY' AND schema_name = 'main'"
            ).fetchall()
        )
        perturbed = _perturbed(frames, salt, fks)
        _replace_in_order(
            list(perturbed),
            lambda t: con.execute(f"DELETE FROM {_q(t)}"),
            lambda t: _duckdb_insert(con, t, perturbed[t]),
            duckdb.ConstraintException,
        )
        con.execute("CHECKPOINT")
    finally:
        con.close()


def _duckdb_insert(con: Any, table: str, df: pl.DataFrame) -> None:
    con.register("backintel_perturbed", df)
    try:
        con.execute(f"INSERT INTO {_q(table)} SELECT * FROM backintel_perturbed")
    finally:
        con.unregister("backintel_perturbed")


def _replace_in_order(
    tables: list[str],
    delete: Callable[[str], object],
    insert: Callable[[str], object],
    blocked: type[Exception],
) -> None:
    """Empty every table (referencing tables first, found by retrying what a foreign key
    blocks), then refill them in the reverse order."""
    order: list[str] = []
    pending = list(tables)
    while pending:
        left = []
        for table in pending:
            try:
                delete(table)
                order.append(table)
            except blocked:
                left.append(table)
        if len(left) == len(pending):
            raise ValueError(f"cannot empty {', '.join(left)}: foreign keys block every order")
        pending = left
    for table in reversed(order):
        insert(table)


def _csv(src: Path, dst: Path, salt: int) -> None:
    import duckdb

    dst.mkdir()
    pinned_path = src / _SCHEMA
    pinned: dict[str, dict[str, str]] = (
        json.loads(pinned_path.read_text()) if pinned_path.is_file() else {}
    )
    con = duckdb.connect(config={"autoload_known_extensions": "false"})
    schema: dict[str, dict[str, str]] = {}
    frames: dict[str, pl.DataFrame] = {}
    try:
        for path in sorted(src.glob("*.csv")):
            where = _lit(str(path.resolve()))
            if path.stem in pinned:
                cols = ", ".join(f"{_lit(k)}: {_lit(v)}" for k, v in pinned[path.stem].items())
                how = f"auto_detect = false, columns = {{{cols}}}"
            else:
                how = "auto_detect = true"
            rel = con.sql(f"SELECT * FROM read_csv({where}, header = true, {how})")
            schema[path.stem] = dict(zip(rel.columns, (str(t) for t in rel.types), strict=True))
            frames[path.stem] = rel.pl()
        for table, df in _perturbed(frames, salt).items():
            con.register("backintel_perturbed", df)
            target = _lit(str(dst / f"{table}.csv"))
            con.execute(f"COPY backintel_perturbed TO {target} (HEADER, DELIMITER ',')")
            con.unregister("backintel_perturbed")
    finally:
        con.close()
    (dst / _SCHEMA).write_text(json.dumps(schema, indent=1))


_BUILDERS: dict[str, Callable[[Path, Path, int], None]] = {
    "sqlite": _sqlite,
    "duckdb": _duckdb,
    "csv": _csv,
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
    files: DatasetFiles, form: str, cache_dir: Path, salt: int, data_hash: str
) -> DatasetFiles:
    """The perturbed copy of a SQLite/DuckDB file or CSV folder, built on first use under
    `cache_dir` and reused while the source's data hash is the same (xdist-safe)."""
    src = _source_path(files, form)
    suffix = "" if form == "csv" else src.suffix
    final = cache_dir / f"{files.name}-{form}-v{PERTURB_VERSION}-s{salt}-{data_hash[:16]}"
    built = final / f"data{suffix}"

    def build(tmp: Path) -> None:
        _BUILDERS[form](src, tmp / built.name, salt)
        (tmp / DONE_FILE).write_text(json.dumps({"source": str(src), "salt": salt}))

    build_once(cache_dir, final, build)
    return _as_files(files, form, built)


def perturb_postgres(admin_dsn: str, salt: int) -> None:
    """Perturb the database at `admin_dsn` (an item's own clone, never the source) in place:
    foreign-key triggers are off for the rewrite (`session_replication_role = replica`)."""
    import psycopg

    with psycopg.connect(admin_dsn, autocommit=False) as con:
        tables = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
                "AND table_type = 'BASE TABLE' ORDER BY 1"
            ).fetchall()
        ]

        def read(table: str) -> pl.DataFrame:
            cur = con.execute(f"SELECT * FROM public.{_q(table)}")
            cols = [d.name for d in cur.description or []]
            return pl.DataFrame(cur.fetchall(), schema=cols, orient="row", infer_schema_length=None)

        frames = _frames(read, tables)
        fks = _foreign_keys(
            con.execute(
                "SELECT cl.relname::text, array_agg(a.attname::text ORDER BY k.n), "
                "pr.relname::text, array_agg(pa.attname::text ORDER BY k.n) "
                "FROM pg_constraint co "
                "JOIN pg_class cl ON cl.oid = co.conrelid "
                "JOIN pg_class pr ON pr.oid = co.confrelid "
                "JOIN pg_namespace ns ON ns.oid = cl.relnamespace AND ns.nspname = 'public' "
                "CROSS JOIN LATERAL unnest(co.conkey, co.confkey) WITH ORDINALITY "
                "AS k(col, pcol, n) "
                "JOIN pg_attribute a ON a.attrelid = co.conrelid AND a.attnum = k.col "
                "JOIN pg_attribute pa ON pa.attrelid = co.confrelid AND pa.attnum = k.pcol "
                "WHERE co.contype = 'f' GROUP BY co.oid, cl.relname, pr.relname"
            ).fetchall()
        )
        con.execute("SET LOCAL session_replication_role = replica")
        for table, df in _perturbed(frames, salt, fks).items():
            con.execute(f"DELETE FROM public.{_q(table)}")
            cols = ", ".join(_q(c) for c in df.columns)
            with con.cursor().copy(f"COPY public.{_q(table)} ({cols}) FROM STDIN") as copy:
                for row in df.rows():
                    copy.write_row(row)
        con.commit()
