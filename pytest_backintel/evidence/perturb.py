"""A perturbed copy of a dataset: the same schema, other values, for checking that evidence
reads the data.

Evidence is re-run on this copy and must give what the evaluator's check query gives there: a
program that returns literals (alone, or hidden in a query over a real table) keeps its values
while the data moved. The copy keeps referential integrity, so a correct query still joins:

- rows are dropped by a deterministic hash of entity keys (a table's first column when it is
  id-like and unique), and every row referring to a dropped key is dropped with it, to a
  fixpoint (an order dropped with its customer takes its items, payments and reviews along);
  tables under `MIN_ROWS` rows keep every row;
- every floating-point value is scaled by a factor between 1.0625 and 1.5 that varies from
  row to row and column to column, so sums, means, ratios and price changes move.

The copy is built once per source and salt as Parquet (under a file lock, renamed into place
when complete) and provisioned through the same `Store` interface as the real copy.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from filelock import FileLock

from stores.base import DatasetFiles
from stores.sqlite_build import build_from_parquet

if TYPE_CHECKING:  # polars is imported where a copy is built, not where a built one is found
    import polars as pl

__all__ = [
    "DONE_FILE",
    "FILE_FORMS",
    "MIN_ROWS",
    "PERTURB_VERSION",
    "build_once",
    "perturb_dataset",
    "perturb_tables",
    "source_form",
]

PERTURB_VERSION = 4
"""Bumped whenever the transformation changes, so old copies are never reused."""
SQLITE_FILE = "perturbed.sqlite"
"""The copy as one SQLite database, beside its Parquet files."""
MIN_ROWS = 4
DROP_ONE_IN = 4
DONE_FILE = "perturbed.json"


def _canonical(table: str, columns: list[str]) -> dict[str, str]:
    """Column -> key name with a short table-wide prefix removed (`l_orderkey` -> `orderkey`)."""
    prefixes = {c.split("_", 1)[0] for c in columns if "_" in c}
    if len(prefixes) == 1 and len(next(iter(prefixes))) <= 2 and all("_" in c for c in columns):
        return {c: c.split("_", 1)[1] for c in columns}
    return {c: c for c in columns}


def _id_like(name: str) -> bool:
    return name.endswith(("_id", "key")) or name == "id"


def _dropped(values: pl.Series, salt: int) -> pl.Series:
    """The deterministic sample of key values that the copy drops (about one in four)."""
    unique = values.unique()
    return unique.filter(unique.hash(seed=salt) % DROP_ONE_IN == 0)


def _hits(df: pl.DataFrame, col: str, values: pl.Series) -> pl.Expr:
    """Rows whose `col` is among `values` (compared as text when the types differ)."""
    import polars as pl

    if df.schema[col] == values.dtype:
        return pl.col(col).is_in(values.implode())
    return pl.col(col).cast(pl.String).is_in(values.cast(pl.String).implode())


def perturb_tables(tables: dict[str, pl.DataFrame], salt: int = 1) -> dict[str, pl.DataFrame]:
    """The perturbed tables (see the module docstring); deterministic for the same input and
    `salt` (each salt drops other rows and scales by other factors)."""
    import polars as pl

    keys = {t: _canonical(t, df.columns) for t, df in tables.items()}
    entity: dict[str, str] = {}  # key name -> the table it identifies
    drops: dict[str, pl.Series] = {}
    for table, df in sorted(tables.items()):
        first = df.columns[0] if df.columns else None
        if first is None or not _id_like(keys[table][first]) or df.height < MIN_ROWS:
            continue
        if df[first].n_unique() != df.height or df[first].null_count():
            continue
        key = keys[table][first]
        if key not in entity:
            entity[key] = table
            drops[key] = _dropped(df[first], salt)
    conditions: dict[str, pl.Expr] = {}
    changed = True
    while changed:
        changed = False
        for table, df in sorted(tables.items()):
            cond = pl.lit(False)
            for col, key in keys[table].items():
                if key in drops and len(drops[key]):
                    cond = cond | _hits(df, col, drops[key])
            conditions[table] = cond.fill_null(False)
            first = df.columns[0] if df.columns else ""
            key = keys[table].get(first, "")
            if first and entity.get(key) == table:
                gone = df.filter(conditions[table])[first]
                if len(gone) > len(drops[key]):
                    drops[key] = gone
                    changed = True
    out = {t: df.filter(~conditions[t]) for t, df in tables.items()}
    n = 0
    for table in sorted(out):
        df = out[table]
        scaled = []
        for col, dtype in df.schema.items():
            if dtype == pl.Float64:
                n += 1
                index = pl.int_range(pl.len(), dtype=pl.Int64)
                step = (index * 2654435761 + n * 97 + salt * 7919) % 8 + 1
                scaled.append((pl.col(col) * (1 + step / 16)).alias(col))
        if scaled:
            out[table] = df.with_columns(scaled)
    return out


def _perturb_parquet(src: Path, dst: Path, salt: int) -> dict[str, pl.DataFrame]:
    import polars as pl

    tables = {p.stem: pl.read_parquet(p) for p in sorted(src.glob("*.parquet"))}
    perturbed = perturb_tables(tables, salt)
    dst.mkdir(parents=True)
    for table, df in perturbed.items():
        df.write_parquet(dst / f"{table}.parquet", statistics=False)
    return perturbed


def _source_id(files: DatasetFiles, salt: int) -> str:
    parts = [str(PERTURB_VERSION), str(salt), files.name, str(files.parquet_dir.resolve())]
    for path in sorted(files.parquet_dir.glob("*.parquet")):
        stat = path.stat()
        parts.append(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}")
    for key, path in sorted(files.extra.items()):
        parts.append(f"{key}={path}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _build(files: DatasetFiles, folder: Path, salt: int) -> None:
    _perturb_parquet(files.parquet_dir, folder / "parquet", salt)
    for key, path in sorted(files.extra.items()):
        kind, _, alias = key.partition(":")
        if kind == "parquet":
            _perturb_parquet(path, folder / f"parquet-{alias}", salt)
    if files.sqlite_path is not None:  # the sqlite backend then copies it, as it copies worlds
        build_from_parquet(sorted((folder / "parquet").glob("*.parquet")), folder / SQLITE_FILE)
    (folder / DONE_FILE).write_text(json.dumps({"source": str(files.parquet_dir), "salt": salt}))


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


def build_once(cache_dir: Path, final: Path, build: Callable[[Path], None]) -> None:
    """Build the folder `final` under `cache_dir` once (xdist-safe): `build` fills a temporary
    folder, which must end up holding `DONE_FILE`, renamed into place under a file lock."""
    if (final / DONE_FILE).is_file():
        return
    cache_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final) + ".lock"):
        if not (final / DONE_FILE).is_file():
            if final.exists():
                shutil.rmtree(final)
            tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=cache_dir))
            tmp.chmod(0o755)
            try:
                build(tmp)
                tmp.rename(final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise


def perturb_dataset(files: DatasetFiles, cache_dir: Path, salt: int = 1) -> DatasetFiles:
    """The perturbed copy of `files` under `cache_dir`, built on first use (xdist-safe)."""
    final = cache_dir / f"{files.name}-{_source_id(files, salt)}"
    build_once(cache_dir, final, lambda tmp: _build(files, tmp, salt))
    return _files(files, final)
