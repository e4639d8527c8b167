"""Which rows a perturbed copy drops and how the rest change (`evidence.perturb` says what and
why), planned from the key columns alone so a copy can be written a batch of rows at a time.

`plan_drops` reads of each table only its id-like columns (and its text columns for a moving
probe), keeps them only for the tables whose keys others follow, and returns a `DropPlan`: per
table a row-local condition (a hash of the row's key, or its key among the dropped keys) and
what `DropPlan.transform` must leave alone. A batch transformed with its offset in the kept
rows gives the same rows as the whole table transformed at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_backintel.evidence.perturb_families import apply_family
from stores.common.schema_keys import DeclaredKeys
from stores.common.view_plan import MIN_ROWS, MOVING_ONE_IN, id_like, key_names
from stores.probe import shift_factor

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "DROP_ONE_IN",
    "UNIQUE_PART_ROWS",
    "DropPlan",
    "entity_key",
    "narrow_columns",
    "plan_drops",
    "unique_key",
    "unique_parts",
]

DROP_ONE_IN = 4

Reader = Callable[[str, list[str]], "pl.DataFrame"]
"""(table, columns) -> those columns of every row of the table."""


def _dropped(values: pl.Series, salt: int, one_in: int) -> pl.Series:
    """The deterministic sample of key values that the copy drops (about one in `one_in`)."""
    unique = values.unique()
    return unique.filter(unique.hash(seed=salt) % one_in == 0)


def _hits(dtype: pl.DataType, col: str, values: pl.Series) -> pl.Expr:
    """Rows whose `col` is among `values` (compared as text when the types differ)."""
    import polars as pl

    if dtype == values.dtype:
        return pl.col(col).is_in(values.implode())
    return pl.col(col).cast(pl.String).is_in(values.cast(pl.String).implode())


UNIQUE_PART_ROWS = 100_000
"""Rows of a key checked for repeats at a time (rows with equal keys share a part): TPC-H
SF1's `lineitem` in 61 parts, whose hash tables hold 100k rows each, not 1M."""


def unique_parts(rows: int) -> int:
    """How many parts a key of `rows` rows is checked for repeats in (`UNIQUE_PART_ROWS`)."""
    return max(1, -(-rows // UNIQUE_PART_ROWS))


def unique_key(df: pl.DataFrame, cols: list[str]) -> bool:
    """No NULL in `cols` and no two rows with the same values there (checked in parts split
    by a hash of the first column, so no hash table holds more than a part's rows)."""
    import polars as pl

    if any(df[c].null_count() for c in cols):
        return False
    parts = unique_parts(df.height)
    keys = df.select(cols)
    for part in range(parts):
        rows = keys if parts == 1 else keys.filter(pl.col(cols[0]).hash() % parts == part)
        if rows.n_unique() != rows.height:
            return False
    return True


def entity_key(df: pl.DataFrame, names: dict[str, str], declared: list[str] | None) -> list[str]:
    """The columns that identify a row: the declared primary key, else the first unique
    id-like column, else every id-like column together when unique (a link table's
    composite key); empty when there is none. `names` covers every column of the table,
    `df` holds at least its id-like ones."""
    if declared and all(c in names for c in declared):
        return list(declared)
    like = [c for c in names if id_like(c) or id_like(names[c])]
    for col in like:
        if unique_key(df, [col]):
            return [col]
    if len(like) > 1 and unique_key(df, like):
        return like
    return []


def narrow_columns(
    schema: pl.Schema, names: dict[str, str], declared: list[str] | None, moving: bool
) -> list[str]:
    """The columns a plan reads of a table: id-like and declared key columns, and text columns
    for a moving probe (whose values it drops rows by)."""
    import polars as pl

    wanted = set(declared or ())
    return [
        c
        for c, dtype in schema.items()
        if id_like(c) or id_like(names[c]) or c in wanted or (moving and dtype == pl.String)
    ]


@dataclass
class DropPlan:
    """The rows each table of a copy drops and the columns its transformation keeps."""

    salt: int
    moving: tuple[str, ...] | None
    min_rows: int
    names: dict[str, dict[str, str]]
    key_cols: dict[str, list[str]]
    linked: set[str]
    entity: dict[str, tuple[str, str]]
    conditions: dict[str, pl.Expr] = field(default_factory=dict)
    fixed: dict[str, set[str]] = field(default_factory=dict)
    first_scaled: dict[str, int] = field(default_factory=dict)
    """Per table, how many columns earlier tables (in name order) had scaled."""

    def kept(self, table: str, df: pl.DataFrame) -> pl.DataFrame:
        """The rows of `df` (some or all of `table`'s) that the copy keeps."""
        return df.filter(~self.conditions[table])

    @property
    def needs_whole_tables(self) -> bool:
        """A family probe (`perturb_families`) reads a table's kept rows as a whole."""
        from pytest_backintel.evidence.perturb_families import FAMILY_BASE

        return self.moving is not None and self.salt >= FAMILY_BASE

    def transform(
        self, table: str, df: pl.DataFrame, offset: int, source: pl.DataFrame | None
    ) -> pl.DataFrame:
        """Kept rows `df`, the first at position `offset` among the table's kept rows, with
        their numbers moved; `source` is the whole table before rows were dropped (read only
        by a family probe, with `offset` 0 and `df` every kept row)."""
        fixed = self.fixed[table]
        out = _scale(df, fixed, self.salt, self.first_scaled[table], offset)
        if self.moving is not None:
            out = _shift(out, fixed, self.salt)
            joins = {c for c, name in self.names[table].items() if name in self.entity}
            if self.needs_whole_tables:
                if source is None or offset:
                    raise ValueError("a family probe transforms a whole table at a time")
                out = apply_family(out, fixed | joins, self.salt, source)
        return out

    def gaps(self, heights: dict[str, int], unchanged: Callable[[str], bool]) -> list[str]:
        """The tables whose rows the copy cannot drop, each with why and whether its numbers
        still move (`unchanged(table)`: the copy's table equals the source's)."""
        gaps = []
        for table in sorted(heights):
            if table in self.linked or heights[table] >= self.min_rows:
                continue
            moved = (
                "nothing in it changes, so a count or a literal over it alone is not caught"
                if unchanged(table)
                else "its numbers are rescaled"
            )
            why = f"it has fewer than {self.min_rows} rows"
            gaps.append(f"table {table!r} keeps every row: {why}; {moved}")
        return gaps


def _scale(df: pl.DataFrame, skip: set[str], salt: int, first: int, offset: int) -> pl.DataFrame:
    """Every floating-point and DECIMAL column (keys aside) scaled by a factor that varies by
    row and column; a DECIMAL is cast back to its own precision, a value it cannot hold kept."""
    import polars as pl

    scaled = []
    number = first
    for col, dtype in df.schema.items():
        if not _scalable(col, dtype, skip):
            continue
        number += 1
        index = pl.int_range(pl.len(), dtype=pl.Int64) + offset
        step = (index * 2654435761 + number * 97 + salt * 7919) % 8 + 1
        if isinstance(dtype, pl.Decimal):
            value = pl.col(col).cast(pl.Float64) * (1 + step / 16)
            scaled.append(value.cast(dtype, strict=False).fill_null(pl.col(col)).alias(col))
        else:
            scaled.append((pl.col(col) * (1 + step / 16)).cast(dtype).alias(col))
    return df.with_columns(scaled) if scaled else df


def _scalable(col: str, dtype: pl.DataType, skip: set[str]) -> bool:
    import polars as pl

    return col not in skip and (dtype.is_float() or isinstance(dtype, pl.Decimal))


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
    tables: list[str],
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


def plan_drops(
    schemas: dict[str, pl.Schema],
    heights: dict[str, int],
    read: Reader,
    salt: int = 1,
    keys: DeclaredKeys | None = None,
    moving: tuple[str, ...] | None = None,
) -> DropPlan:
    """The plan for tables of these `schemas` and row counts (`perturb.perturb_tables` says
    what it drops); `read` gives a table's `narrow_columns`."""
    import polars as pl

    keys = keys or DeclaredKeys()
    min_rows, one_in = (MIN_ROWS, DROP_ONE_IN) if moving is None else (1, MOVING_ONE_IN)
    tables = sorted(schemas)
    names = {t: key_names(t, list(schemas[t])) for t in tables}
    entity: dict[str, tuple[str, str]] = {}  # key name -> (table, column) it identifies
    owners: dict[str, pl.DataFrame] = {}  # the narrow frames of the tables in `entity`
    drops: dict[str, pl.Series] = {}
    direct: dict[str, pl.Expr] = {}  # tables whose own sampled rows are dropped by a hash
    key_cols: dict[str, list[str]] = {}
    for table in tables:
        declared = keys.primary.get(table)
        narrow = narrow_columns(schemas[table], names[table], declared, moving is not None)
        df = read(table, narrow) if narrow else pl.DataFrame()
        cols = entity_key(df, names[table], declared)
        key_cols[table] = cols
        if not cols or heights[table] < min_rows:
            continue
        name = names[table][cols[0]]
        if len(cols) == 1 and name != "id" and id_like(name) and name not in entity:
            entity[name], owners[table] = (table, cols[0]), df
            drops[name] = _dropped(df[cols[0]], salt, one_in)
        else:
            direct[table] = pl.struct(cols).hash(seed=salt) % one_in == 0
    linked = _linked(tables, key_cols, names, entity, keys)
    for table in tables:
        schema = schemas[table]
        if not key_cols[table] and table not in linked and heights[table] >= min_rows:
            direct[table] = pl.struct(list(schema)).hash(seed=salt) % one_in == 0
        texts = [c for c, t in schema.items() if t == pl.String]
        for col in texts if moving else []:
            hit = pl.col(col).is_in(list(moving or ())).fill_null(False)
            direct[table] = direct[table] | hit if table in direct else hit
    plan = DropPlan(salt, moving, min_rows, names, key_cols, linked, entity)
    changed = True
    while changed:
        changed = False
        for table in tables:
            cond = direct.get(table, pl.lit(False))
            for col, name in names[table].items():
                if name in drops and len(drops[name]):
                    cond = cond | _hits(schemas[table][col], col, drops[name])
            plan.conditions[table] = cond.fill_null(False)
            for name, (owner, col) in entity.items():
                if owner == table:
                    gone = owners[table].filter(plan.conditions[table])[col]
                    if len(gone) > len(drops[name]):
                        drops[name], changed = gone, True
    skip = {(t, c) for t, cols in key_cols.items() for c in cols}
    skip |= {(t, c) for t, cols, _, _ in keys.foreign for c in cols}
    scaled = 0
    for table in tables:
        plan.fixed[table] = {c for t, c in skip if t == table}
        plan.first_scaled[table] = scaled
        scaled += sum(_scalable(c, d, plan.fixed[table]) for c, d in schemas[table].items())
    return plan
