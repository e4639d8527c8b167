"""A folder of Parquet tables perturbed a batch of rows at a time, in bounded memory.

The plan (`perturb_plan.plan_drops`) reads only the tables' key columns; each table is then
read `BATCH_ROWS` rows at a time, its dropped rows filtered out, its numbers moved with the
batch's offset among the kept rows, and appended to its Parquet file. The rows are the ones
`perturb.perturb_tables` gives for the whole folder in memory (`tests/test_perturb_stream.py`).
A family probe (`perturb_families`), which reads a table's kept rows as a whole, and a table
under the plan's minimum row count are transformed whole, one table at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_backintel.evidence.perturb_plan import DropPlan, plan_drops

if TYPE_CHECKING:
    import polars as pl
    import pyarrow.parquet as pq

__all__ = ["BATCH_ROWS", "perturb_parquet"]

BATCH_ROWS = 200_000
"""Rows read, transformed and written at a time (some 40 MB of TPC-H's `lineitem`)."""


def _height(path: Path) -> int:
    import polars as pl

    return int(pl.scan_parquet(path).select(pl.len()).collect().item())


def _writer(path: Path, schema: pl.Schema) -> pq.ParquetWriter:
    """A Parquet file of the table's schema (polars' types as Arrow's oldest compatible
    forms, zstd-compressed without statistics, as `DataFrame.write_parquet` wrote it)."""
    import polars as pl
    import pyarrow.parquet as pq

    arrow = pl.DataFrame(schema=schema).to_arrow(compat_level=pl.CompatLevel.oldest()).schema
    return pq.ParquetWriter(path, arrow, compression="zstd", write_statistics=False)


def _append(writer: pq.ParquetWriter, df: pl.DataFrame) -> None:
    import polars as pl

    writer.write_table(df.to_arrow(compat_level=pl.CompatLevel.oldest()).cast(writer.schema))


def _batches(path: Path, batch_rows: int) -> Iterator[tuple[int, int]]:
    """(offset, rows) of batches of whole row groups, each of at least `batch_rows` rows but
    the last, so no row group is decoded twice."""
    import pyarrow.parquet as pq

    metadata = pq.ParquetFile(path).metadata
    offset = rows = 0
    for group in range(metadata.num_row_groups):
        rows += metadata.row_group(group).num_rows
        if rows >= batch_rows:
            yield offset, rows
            offset, rows = offset + rows, 0
    if rows:
        yield offset, rows


def _kept_mask(
    plan: DropPlan, table: str, path: Path, columns: list[str], height: int
) -> pl.Series | None:
    """Which rows of `table` the copy keeps, from the columns its condition reads (a key's
    dropped values are hashed once, not once per batch); None when the condition reads every
    column (a table with no key drops rows by a hash of the whole row), left to each batch."""
    import polars as pl

    read = plan.conditions[table].meta.root_names()
    if len(set(read)) == len(columns):
        return None
    frame = pl.read_parquet(path, columns=sorted(set(read))) if read else None
    if frame is None:  # a constant condition
        return pl.repeat(pl.select(~plan.conditions[table]).item(), height, eager=True)
    return frame.select((~plan.conditions[table]).alias("kept"))["kept"]


def _write_table(
    plan: DropPlan, table: str, path: Path, height: int, out: Path, batch_rows: int
) -> bool:
    """Write `table`'s perturbed rows to `out`; whether they equal the source's."""
    import polars as pl

    source = pl.scan_parquet(path)
    writer = _writer(out, source.collect_schema())
    try:
        if plan.needs_whole_tables or height < plan.min_rows:
            whole = source.collect()
            moved = plan.transform(table, plan.kept(table, whole), 0, whole)
            _append(writer, moved)
            return moved.equals(whole)
        mask = _kept_mask(plan, table, path, writer.schema.names, height)
        kept = 0
        for offset, rows in _batches(path, batch_rows):
            batch = source.slice(offset, rows).collect()
            if mask is None:
                batch = plan.kept(table, batch)
            else:
                batch = batch.filter(mask.slice(offset, rows))
            _append(writer, plan.transform(table, batch, kept, None))
            kept += batch.height
        return False  # only a table under the minimum is asked
    finally:
        writer.close()


def perturb_parquet(
    src: Path,
    dst: Path,
    salt: int,
    notes: list[str] | None = None,
    moving: tuple[str, ...] | None = None,
    batch_rows: int = BATCH_ROWS,
) -> None:
    """The tables of `src` (`*.parquet`, one per table) perturbed into a new folder `dst`;
    the tables the copy keeps whole are named in `notes`, with why."""
    import polars as pl

    paths = {p.stem: p for p in sorted(src.glob("*.parquet"))}
    schemas = {t: pl.Schema(pl.read_parquet_schema(p)) for t, p in paths.items()}
    heights = {t: _height(p) for t, p in paths.items()}

    def read(table: str, columns: list[str]) -> pl.DataFrame:
        return pl.read_parquet(paths[table], columns=columns)

    plan = plan_drops(schemas, heights, read, salt, None, moving)
    dst.mkdir(parents=True)
    unchanged = {
        t: _write_table(plan, t, p, heights[t], dst / f"{t}.parquet", batch_rows)
        for t, p in paths.items()
    }
    if notes is not None:
        notes.extend(plan.gaps(heights, unchanged.__getitem__))
