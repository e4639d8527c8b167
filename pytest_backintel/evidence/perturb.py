"""A perturbed copy of a dataset: the same schema, other values, for checking that evidence
reads the data.

Evidence is re-run on this copy and must give what the evaluator's check query gives there: a
program that returns literals (alone, or hidden in a query over a real table) keeps its values
while the data moved. The copy keeps referential integrity, so a correct query still joins:

- rows are dropped by a deterministic hash of entity keys: a table's declared primary key
  (single or composite), else its first unique id-like column (`id`, `*_id`, `*Id`, `*ID`,
  `*key`), else its id-like columns together; every row referring to a dropped key is dropped
  with it, through declared foreign keys and through columns of the same key name, to a
  fixpoint (an order dropped with its customer takes its items, payments and reviews along);
  tables under `MIN_ROWS` rows keep every row;
- every floating-point and DECIMAL value outside a key is scaled by a factor between 1.0625
  and 1.5 that varies from row to row and column to column, so sums, means, ratios and price
  changes move.

A table whose rows cannot be dropped is named, with why, in the copy's notes (`notes_of`),
which the run shows in its records and `run.json`.

Which rows drop and what moves is planned from the key columns alone (`perturb_plan`); a
built world's copy is then written a batch of rows at a time (`perturb_stream`), in bounded
memory, and `perturb_tables` applies the same plan to frames in memory.

The copy is built once per source and salt as Parquet (under a file lock, renamed into place
when complete) and provisioned through the same `Store` interface as the real copy. When the
source has a SQLite file and the store reads one (`StoreCapabilities.reads_sqlite_file`), the
copy gets one too, written once per machine: with the copy, or added to a copy built earlier
for a store that did not need it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from filelock import FileLock

from pytest_backintel.evidence.perturb_plan import entity_key, plan_drops
from pytest_backintel.evidence.perturb_stream import perturb_parquet
from stores.base import DatasetFiles
from stores.common.schema_keys import DeclaredKeys, ForeignKey
from stores.common.view_plan import (
    DONE_FILE,
    MIN_ROWS,
    PERTURB_VERSION,
    build_once,
    id_like,
    key_names,
    write_done,
)
from stores.engine.sqlite_copy import build_from_parquet

if TYPE_CHECKING:  # polars is imported where a copy is built, not where a built one is found
    import polars as pl

__all__ = [
    "DONE_FILE",
    "FILE_FORMS",
    "MIN_ROWS",
    "PERTURB_VERSION",
    "build_once",
    "entity_key",
    "id_like",
    "key_names",
    "notes_of",
    "perturb_dataset",
    "perturb_tables",
    "source_form",
    "write_done",
]

SQLITE_FILE = "perturbed.sqlite"
"""The copy as one SQLite database, beside its Parquet files."""


def _without_orphans(
    frames: dict[str, pl.DataFrame], fks: list[ForeignKey]
) -> dict[str, pl.DataFrame]:
    """Rows whose declared foreign key points at a dropped row are dropped too (to a
    fixpoint), so the copy keeps the source's constraints."""
    import polars as pl

    changed = True
    while changed:
        changed = False
        for table, cols, parent, pcols in fks:
            if table not in frames or parent not in frames or not cols:
                continue
            if not set(cols) <= set(frames[table].columns):
                continue
            if not set(pcols) <= set(frames[parent].columns):
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


def perturb_tables(
    tables: dict[str, pl.DataFrame],
    salt: int = 1,
    keys: DeclaredKeys | None = None,
    notes: list[str] | None = None,
    moving: tuple[str, ...] | None = None,
) -> dict[str, pl.DataFrame]:
    """The perturbed tables (see the module docstring); deterministic for the same input and
    `salt` (each salt drops other rows and scales by other factors). `keys` are the source's
    declared keys; a table whose rows cannot be dropped is named in `notes`, with why. With
    `moving` (a probe that must move an answer, `view_plan.moving_plans`): small tables drop
    rows too, integer columns that are no key grow, and rows holding one of its values in a
    text column are dropped with their dependants."""
    keys = keys or DeclaredKeys()
    plan = plan_drops(
        {t: df.schema for t, df in tables.items()},
        {t: df.height for t, df in tables.items()},
        lambda table, columns: tables[table].select(columns),
        salt,
        keys,
        moving,
    )
    out = {t: plan.kept(t, df) for t, df in tables.items()}
    out = _without_orphans(out, keys.foreign)
    for table in sorted(out):
        out[table] = plan.transform(table, out[table], 0, tables[table])
    if notes is not None:
        heights = {t: df.height for t, df in tables.items()}
        notes.extend(plan.gaps(heights, lambda t: out[t].equals(tables[t])))
    return out


def _source_id(files: DatasetFiles, salt: int) -> str:
    parts = [str(PERTURB_VERSION), str(salt), files.name, str(files.parquet_dir.resolve())]
    for path in sorted(files.parquet_dir.glob("*.parquet")):
        stat = path.stat()
        parts.append(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}")
    for key, path in sorted(files.extra.items()):
        parts.append(f"{key}={path}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _build(
    files: DatasetFiles, folder: Path, salt: int, moving: tuple[str, ...] | None, sqlite: bool
) -> None:
    notes: list[str] = []
    perturb_parquet(files.parquet_dir, folder / "parquet", salt, notes, moving)
    for key, path in sorted(files.extra.items()):
        kind, _, alias = key.partition(":")
        if kind == "parquet":
            perturb_parquet(path, folder / f"parquet-{alias}", salt, notes, moving)
    if sqlite:
        _write_sqlite(folder)
    write_done(folder, str(files.parquet_dir), salt, notes)


def _write_sqlite(folder: Path) -> None:
    """The copy's tables as one SQLite file, which the sqlite backend copies as it copies a
    world's (built once per machine, not by every process's backend from the Parquet)."""
    build_from_parquet(sorted((folder / "parquet").glob("*.parquet")), folder / SQLITE_FILE)


def _add_sqlite(final: Path) -> None:
    """Give a copy built without a SQLite file one (under the copy's lock; once)."""
    if (final / SQLITE_FILE).is_file():
        return
    with FileLock(str(final) + ".lock"):
        if not (final / SQLITE_FILE).is_file():
            _write_sqlite(final)


def notes_of(copy: DatasetFiles) -> list[str]:
    """The tables a built copy (`perturb_dataset`, `perturb_source`) keeps whole, with why."""
    try:
        done = json.loads((copy.parquet_dir.parent / DONE_FILE).read_text())
    except (OSError, ValueError):
        return []
    notes = done.get("notes") if isinstance(done, dict) else None
    return [str(n) for n in notes] if isinstance(notes, list) else []


def _files(files: DatasetFiles, folder: Path) -> DatasetFiles:
    """The copy as a dataset: Parquet, and the same tables as a SQLite file when the source
    had one (built with the copy, once per machine, not by every process's sqlite backend)."""
    extra: dict[str, Path] = {}
    for key, path in files.extra.items():
        kind, _, alias = key.partition(":")
        if kind == "parquet":
            extra[key] = folder / f"parquet-{alias}"
        elif kind != "sqlite":
            extra[key] = path
    sqlite = folder / SQLITE_FILE
    return DatasetFiles(
        name=files.name,
        parquet_dir=folder / "parquet",
        sqlite_path=sqlite if sqlite.is_file() else None,
        extra=extra,
    )


FILE_FORMS = ("sqlite", "duckdb", "csv")


def source_form(files: DatasetFiles) -> str | None:
    """`parquet` for a Parquet folder, `sqlite`/`duckdb`/`csv` for a user's file or folder,
    None for a source with no files (a database such as PostgreSQL)."""
    for kind in ("duckdb", "csv"):
        if kind in files.extra:
            return kind
    if files.sqlite_path is not None and files.sqlite_path == files.parquet_dir:
        return "sqlite"
    if files.parquet_dir.is_dir() and any(files.parquet_dir.glob("*.parquet")):
        return "parquet"
    return None


def perturb_dataset(
    files: DatasetFiles,
    cache_dir: Path,
    salt: int = 1,
    moving: tuple[str, ...] | None = None,
    sqlite: bool = True,
) -> DatasetFiles:
    """The perturbed copy of `files` under `cache_dir`, built on first use (xdist-safe);
    `moving` as in `perturb_tables` (its salt names the copy: `probe.moving_salt`); with a
    SQLite file when the source has one and `sqlite` (the store reads it)."""
    final = (
        cache_dir / f"{files.name}-{_source_id(files, salt)}{'-m' if moving is not None else ''}"
    )
    sqlite = sqlite and files.sqlite_path is not None
    build_once(cache_dir, final, lambda tmp: _build(files, tmp, salt, moving, sqlite))
    if sqlite:
        _add_sqlite(final)
    return _files(files, final)
