"""A SQLite file from Parquet holds the same declared types, cells and row order whether DuckDB
copied a table's rows or Python converted them cell by cell (`stores.engine.sqlite_copy`)."""

from __future__ import annotations

import datetime as dt
import sqlite3
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stores.base import StoreError
from stores.common.sqlite_file import quote_ident
from stores.engine import sqlite_copy
from stores.engine.sqlite_copy import build_from_parquet, cell_sql

COLUMNS: dict[str, tuple[pa.DataType, st.SearchStrategy[object]]] = {
    "flag": (pa.bool_(), st.booleans()),
    "small": (pa.int8(), st.integers(-128, 127)),
    "count": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "unsigned": (pa.uint32(), st.integers(0, 2**32 - 1)),
    "ratio": (pa.float64(), st.floats(allow_nan=True, allow_infinity=True)),
    "single": (pa.float32(), st.floats(width=32, allow_nan=False)),
    "price": (
        pa.decimal128(15, 2),
        st.decimals(min_value=-(10**12), max_value=10**12, places=2, allow_nan=False),
    ),
    "wide": (
        pa.decimal128(20, 4),
        st.decimals(min_value=-(10**15), max_value=10**15, places=4, allow_nan=False),
    ),
    "name": (pa.string(), st.text(max_size=12)),
    "blob": (pa.binary(), st.binary(max_size=8)),
    "day": (pa.date32(), st.dates()),
    "at": (pa.timestamp("us"), st.datetimes()),
    "at_ms": (pa.timestamp("ms"), st.datetimes().map(lambda d: d.replace(microsecond=0))),
    "clock": (pa.time64("us"), st.times()),
}


def _dump(path: Path) -> list[object]:
    """Every table's declaration and, in rowid order, each cell's storage class and value."""
    con = sqlite3.connect(path)
    try:
        out: list[object] = []
        for name, sql in con.execute("SELECT name, sql FROM sqlite_master ORDER BY name"):
            out.append((name, sql))
            cols = [
                quote_ident(r[1]) for r in con.execute(f"PRAGMA table_info({quote_ident(name)})")
            ]
            cells = ", ".join(f"typeof({c}), quote({c})" for c in cols)
            out += con.execute(f"SELECT {cells} FROM {quote_ident(name)} ORDER BY rowid").fetchall()
        return out
    finally:
        con.close()


def _both(files: list[Path], tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list, list]:
    monkeypatch.setattr(sqlite_copy, "DUCKDB_ROWS", 0)  # every file through DuckDB
    build_from_parquet(files, tmp / "duckdb.sqlite")
    monkeypatch.setattr(sqlite_copy, "DUCKDB_ROWS", 10**12)  # every cell in Python
    build_from_parquet(files, tmp / "python.sqlite")
    return _dump(tmp / "duckdb.sqlite"), _dump(tmp / "python.sqlite")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_duckdb_and_python_write_the_same_cells(
    data: st.DataObject, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = data.draw(st.lists(st.sampled_from(sorted(COLUMNS)), min_size=1, unique=True))
    rows = data.draw(st.integers(0, 30))
    arrays = {}
    for name in names:
        kind, values = COLUMNS[name]
        cells = data.draw(st.lists(st.one_of(st.none(), values), min_size=rows, max_size=rows))
        arrays[name] = pa.array(cells, type=kind)
    tmp = tmp_path_factory.mktemp("copy")
    pq.write_table(pa.table(arrays), tmp / "t.parquet")
    fast, slow = _both([tmp / "t.parquet"], tmp, monkeypatch)
    assert fast == slow


def test_rows_keep_their_order_across_row_groups_and_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 60_000
    table = pa.table(
        {
            "id": pa.array(range(n, 0, -1), pa.int64()),
            "price": pa.array([Decimal(i) / 100 for i in range(n)], pa.decimal128(12, 2)),
            "at": pa.array(
                [
                    dt.datetime(2017, 1, 1)
                    + dt.timedelta(seconds=7 * i, microseconds=(i % 3) * 250_000)
                    for i in range(n)
                ],
                pa.timestamp("us"),
            ),
        }
    )
    pq.write_table(table, tmp_path / "big.parquet", row_group_size=1_000)
    pq.write_table(table.slice(0, 5), tmp_path / "small.parquet")
    fast, slow = _both(
        [tmp_path / "big.parquet", tmp_path / "small.parquet"], tmp_path, monkeypatch
    )
    assert fast == slow
    assert len(fast) == n + 5 + 2


def test_odd_names_are_quoted_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = pa.table({"select": [1, 2], 'say "hi"': ["a", None], "prix €": [1.5, 2.0]})
    pq.write_table(table, tmp_path / "order items.parquet")
    fast, slow = _both([tmp_path / "order items.parquet"], tmp_path, monkeypatch)
    assert fast == slow
    assert fast[1] == ("integer", "1", "text", "'a'", "real", "1.5")


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("DECIMAL(15,2)", 'CAST("c" AS DOUBLE)'),
        ("DECIMAL(18,2)", None),
        ("UBIGINT", None),
        ("TIMESTAMP_MS", None),
        ("TIMESTAMP WITH TIME ZONE", None),
        ("TIME", None),
        ("INTEGER[]", None),
    ],
)
def test_only_exact_renderings_go_through_duckdb(kind: str, expected: str | None) -> None:
    assert cell_sql("c", kind) == expected


def test_no_parquet_file_is_named(tmp_path: Path) -> None:
    """An empty folder (a world or copy with no table) is a clear error, not a missing
    temporary file."""
    with pytest.raises(StoreError, match="no Parquet file to read"):
        build_from_parquet([], tmp_path / "empty.sqlite")
    assert not list(tmp_path.iterdir())
