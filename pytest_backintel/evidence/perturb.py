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

The copy is built once per source and salt as Parquet (under a file lock, renamed into place
when complete) and provisioned through the same `Store` interface as the real copy.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_backintel.evidence.perturb_families import apply_family
from stores.base import DatasetFiles
from stores.common.schema_keys import DeclaredKeys, ForeignKey
from stores.common.view_plan import (
    DONE_FILE,
    MIN_ROWS,
    MOVING_ONE_IN,
    PERTURB_VERSION,
    build_once,
    id_like,
    key_names,
    write_done,
)
from stores.engine.sqlite_copy import build_from_parquet
from stores.probe import shift_factor

if TYPE_CHECKING:  # polars is imported where a copy is built, not where a built one is found
    import polars as pl

__all__ = [
    "DONE_FILE",
    "FILE_FORMS",
    "MIN_ROWS",
    "PERTURB_VERSION",
    "build_once",
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
DROP_ONE_IN = 4


def _dropped(values: pl.Series, salt: int, one_in: int) -> pl.Series:
    """The deterministic sample of key values that the copy drops (about one in `one_in`)."""
    unique = values.unique()
    return unique.filter(unique.hash(seed=salt) % one_in == 0)


def _hits(df: pl.DataFrame, col: str, values: pl.Series) -> pl.Expr:
    """Rows whose `col` is among `values` (compared as text when the types differ)."""
    import polars as pl

    if df.schema[col] == values.dtype:
        return pl.col(col).is_in(values.implode())
    return pl.col(col).cast(pl.String).is_in(values.cast(pl.String).implode())


def _unique(df: pl.DataFrame, cols: list[str]) -> bool:
    """No NULL in `cols` and no two rows with the same values there."""
    if any(df[c].null_count() for c in cols):
        return False
    if len(cols) == 1:
        return bool(df[cols[0]].n_unique() == df.height)
    return bool(df.select(cols).n_unique() == df.height)


def entity_key(df: pl.DataFrame, names: dict[str, str], declared: list[str] | None) -> list[str]:
    """The columns that identify a row: the declared primary key, else the first unique
    id-like column, else every id-like column together when unique (a link table's
    composite key); empty when there is none."""
    if declared and all(c in df.columns for c in declared):
        return list(declared)
    like = [c for c in df.columns if id_like(c) or id_like(names[c])]
    for col in like:
        if _unique(df, [col]):
            return [col]
    if len(like) > 1 and _unique(df, like):
        return like
    return []


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


def _scale(df: pl.DataFrame, skip: set[str], salt: int, counter: list[int]) -> pl.DataFrame:
    """Every floating-point and DECIMAL column (keys aside) scaled by a factor that varies by
    row and column; a DECIMAL is cast back to its own precision, a value it cannot hold kept."""
    import polars as pl

    scaled = []
    for col, dtype in df.schema.items():
        if col in skip or not (dtype.is_float() or isinstance(dtype, pl.Decimal)):
            continue
        counter[0] += 1
        index = pl.int_range(pl.len(), dtype=pl.Int64)
        step = (index * 2654435761 + counter[0] * 97 + salt * 7919) % 8 + 1
        if isinstance(dtype, pl.Decimal):
            value = pl.col(col).cast(pl.Float64) * (1 + step / 16)
            scaled.append(value.cast(dtype, strict=False).fill_null(pl.col(col)).alias(col))
        else:
            scaled.append((pl.col(col) * (1 + step / 16)).cast(dtype).alias(col))
    return df.with_columns(scaled) if scaled else df


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
    import polars as pl

    keys = keys or DeclaredKeys()
    min_rows, one_in = (MIN_ROWS, DROP_ONE_IN) if moving is None else (1, MOVING_ONE_IN)
    names = {t: key_names(t, df.columns) for t, df in tables.items()}
    entity: dict[str, tuple[str, str]] = {}  # key name -> (table, column) it identifies
    drops: dict[str, pl.Series] = {}
    direct: dict[str, pl.Expr] = {}  # tables whose own sampled rows are dropped by a hash
    key_cols: dict[str, list[str]] = {}
    for table, df in sorted(tables.items()):
        cols = entity_key(df, names[table], keys.primary.get(table))
        key_cols[table] = cols
        if not cols or df.height < min_rows:
            continue
        name = names[table][cols[0]]
        if len(cols) == 1 and name != "id" and id_like(name) and name not in entity:
            entity[name] = (table, cols[0])
            drops[name] = _dropped(df[cols[0]], salt, one_in)
        else:
            direct[table] = pl.struct(cols).hash(seed=salt) % one_in == 0
    linked = _linked(tables, key_cols, names, entity, keys)
    for table, df in sorted(tables.items()):
        if not key_cols[table] and table not in linked and df.height >= min_rows:
            direct[table] = pl.struct(df.columns).hash(seed=salt) % one_in == 0
        texts = [c for c, t in df.schema.items() if t == pl.String]
        for col in texts if moving else []:
            hit = pl.col(col).is_in(list(moving or ())).fill_null(False)
            direct[table] = direct[table] | hit if table in direct else hit
    conditions: dict[str, pl.Expr] = {}
    changed = True
    while changed:
        changed = False
        for table, df in sorted(tables.items()):
            cond = direct.get(table, pl.lit(False))
            for col, name in names[table].items():
                if name in drops and len(drops[name]):
                    cond = cond | _hits(df, col, drops[name])
            conditions[table] = cond.fill_null(False)
            for name, (owner, col) in entity.items():
                if owner == table:
                    gone = df.filter(conditions[table])[col]
                    if len(gone) > len(drops[name]):
                        drops[name], changed = gone, True
    out = {t: df.filter(~conditions[t]) for t, df in tables.items()}
    out = _without_orphans(out, keys.foreign)
    skip = {(t, c) for t, cols in key_cols.items() for c in cols}
    skip |= {(t, c) for t, cols, _, _ in keys.foreign for c in cols}
    counter = [0]
    for table in sorted(out):
        fixed = {c for t, c in skip if t == table}
        out[table] = _scale(out[table], fixed, salt, counter)
        if moving is not None:
            out[table] = _shift(out[table], fixed, salt)
            joins = {c for c, name in names[table].items() if name in entity}
            out[table] = apply_family(out[table], fixed | joins, salt, tables[table])
    if notes is not None:
        notes.extend(_gaps(tables, out, key_cols, linked, min_rows))
    return out


def _shift(df: pl.DataFrame, skip: set[str], salt: int) -> pl.DataFrame:
    """Integer columns that are no key grown by `shift_factor` sixteenths (0 and 1 stay)."""
    import polars as pl

    k = shift_factor(salt)
    grown = [
        (pl.col(c) + (pl.col(c).cast(pl.Int64) * k / 16).cast(pl.Int64)).cast(t).alias(c)
        for c, t in df.schema.items()
        if t.is_integer() and c not in skip and not id_like(c)
    ]
    return df.with_columns(grown) if grown else df


def _linked(
    tables: dict[str, pl.DataFrame],
    key_cols: dict[str, list[str]],
    names: dict[str, dict[str, str]],
    entity: dict[str, tuple[str, str]],
    keys: DeclaredKeys,
) -> set[str]:
    """The tables whose rows drop with a row they point at (declared foreign key, or a
    column named as another table's entity key)."""
    linked = {t for t, _, p, _ in keys.foreign if key_cols.get(p) and t in tables}
    for table, cols in names.items():
        if any(n in entity and entity[n][0] != table for n in cols.values()):
            linked.add(table)
    return linked


def _gaps(
    tables: dict[str, pl.DataFrame],
    out: dict[str, pl.DataFrame],
    key_cols: dict[str, list[str]],
    linked: set[str],
    min_rows: int,
) -> list[str]:
    """The tables whose rows the copy cannot drop, each with why and whether its numbers
    still move (a table with no key drops rows by a hash of the whole row)."""
    gaps = []
    for table, df in sorted(tables.items()):
        if table in linked or df.height >= min_rows:
            continue
        moved = (
            "its numbers are rescaled"
            if not out[table].equals(df)
            else "nothing in it changes, so a count or a literal over it alone is not caught"
        )
        why = f"it has fewer than {min_rows} rows"
        gaps.append(f"table {table!r} keeps every row: {why}; {moved}")
    return gaps


def _perturb_parquet(
    src: Path,
    dst: Path,
    salt: int,
    notes: list[str] | None = None,
    moving: tuple[str, ...] | None = None,
) -> dict[str, pl.DataFrame]:
    import polars as pl

    tables = {p.stem: pl.read_parquet(p) for p in sorted(src.glob("*.parquet"))}
    perturbed = perturb_tables(tables, salt, notes=notes, moving=moving)
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


def _build(files: DatasetFiles, folder: Path, salt: int, moving: tuple[str, ...] | None) -> None:
    notes: list[str] = []
    _perturb_parquet(files.parquet_dir, folder / "parquet", salt, notes, moving)
    for key, path in sorted(files.extra.items()):
        kind, _, alias = key.partition(":")
        if kind == "parquet":
            _perturb_parquet(path, folder / f"parquet-{alias}", salt, notes, moving)
    if files.sqlite_path is not None:  # the sqlite backend then copies it, as it copies worlds
        build_from_parquet(sorted((folder / "parquet").glob("*.parquet")), folder / SQLITE_FILE)
    write_done(folder, str(files.parquet_dir), salt, notes)


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
    files: DatasetFiles, cache_dir: Path, salt: int = 1, moving: tuple[str, ...] | None = None
) -> DatasetFiles:
    """The perturbed copy of `files` under `cache_dir`, built on first use (xdist-safe);
    `moving` as in `perturb_tables` (its salt names the copy: `probe.moving_salt`)."""
    final = (
        cache_dir / f"{files.name}-{_source_id(files, salt)}{'-m' if moving is not None else ''}"
    )
    build_once(cache_dir, final, lambda tmp: _build(files, tmp, salt, moving))
    return _files(files, final)
