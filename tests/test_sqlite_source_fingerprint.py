"""A SQLite source's logical fingerprint (`sqlite_source_fingerprint`): DuckDB's one-pass
summary where DuckDB reads a table exactly, the sorted rows elsewhere. It ignores row order and
file layout, sees every changed cell, and never lets DuckDB merge what SQLite keeps apart (a
column without a declared type, a DATETIME column, a value of another storage class)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stores.base import DatasetFiles
from stores.sqlite.fingerprint import sqlite_logical_fingerprint, sqlite_source_fingerprint
from stores.sqlite.policy import connect_read_only
from stores.sqlite.source import SQLiteSourceStore
from stores.sqlite.summary import duckdb_row_summaries

TYPED = "CREATE TABLE Invoice (InvoiceId INTEGER PRIMARY KEY, Total DECIMAL(10,2), Note TEXT)"


def build(path: Path, ddl: str, rows: Sequence[Sequence[object]], *, vacuum: bool = False) -> Path:
    if path.exists():
        path.unlink()
    con = sqlite3.connect(path)
    con.execute(ddl)
    marks = ", ".join("?" for _ in rows[0]) if rows else ""
    if rows:
        con.executemany(f"INSERT INTO {ddl.split()[2]} VALUES ({marks})", rows)
    con.commit()
    if vacuum:
        con.execute("VACUUM")
    con.close()
    return path


def fingerprint(path: Path) -> str:
    con = connect_read_only(path)
    try:
        return sqlite_source_fingerprint(con, path)
    finally:
        con.close()


def test_a_typed_table_is_read_by_duckdb_in_one_pass(tmp_path: Path) -> None:
    path = build(tmp_path / "a.sqlite", TYPED, [(1, 9.99, "x"), (2, 5, None)])
    summaries = duckdb_row_summaries(path, ["Invoice"])
    assert summaries["Invoice"][0] == 2  # the row count, then the sum and xor of row hashes


rows_strategy = st.lists(
    st.tuples(
        st.floats(allow_nan=False, allow_infinity=False, width=32),
        st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6)
        | st.none(),
    ),
    min_size=1,
    max_size=30,
)


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=rows_strategy, seed=st.randoms(use_true_random=False), data=st.data())
def test_order_and_layout_do_not_matter_and_every_cell_does(
    tmp_path: Path, rows: list[tuple[float, str | None]], seed, data: st.DataObject
) -> None:
    keyed = [(i + 1, total, note) for i, (total, note) in enumerate(rows)]
    first = fingerprint(build(tmp_path / "a.sqlite", TYPED, keyed))
    shuffled = list(keyed)
    seed.shuffle(shuffled)
    assert fingerprint(build(tmp_path / "b.sqlite", TYPED, shuffled, vacuum=True)) == first
    index = data.draw(st.integers(0, len(keyed) - 1))
    changed = list(keyed)
    key, total, note = changed[index]
    changed[index] = (key, total, (note or "") + "!")
    assert fingerprint(build(tmp_path / "c.sqlite", TYPED, changed)) != first
    changed[index] = (key, total + 1.0, note)
    if total + 1.0 != total:
        assert fingerprint(build(tmp_path / "c.sqlite", TYPED, changed)) != first


def test_values_duckdb_would_merge_are_told_apart(tmp_path: Path) -> None:
    """Each pair differs only where DuckDB's reading would merge it: one of them, at least,
    is read the sorted way."""
    pairs = [
        ("CREATE TABLE t (k INTEGER PRIMARY KEY, v)", [(1, 1)], [(1, "1")]),  # no declared type
        ("CREATE TABLE t (k INTEGER PRIMARY KEY, v)", [(1, 1.0)], [(1, 1)]),
        (
            "CREATE TABLE t (k INTEGER PRIMARY KEY, v DATETIME)",
            [(1, "2020-01-01 10:00:00")],
            [(1, "2020-01-01T10:00:00")],
        ),
        ("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)", [(1, "ab")], [(1, b"ab")]),
        ("CREATE TABLE t (k INTEGER PRIMARY KEY, v INTEGER)", [(1, "abc")], [(1, "abd")]),
    ]
    for ddl, one, two in pairs:
        a = build(tmp_path / "a.sqlite", ddl, one)
        b = build(tmp_path / "b.sqlite", ddl, two)
        assert not (duckdb_row_summaries(a, ["t"]) and duckdb_row_summaries(b, ["t"])), ddl
        assert fingerprint(a) != fingerprint(b), (ddl, one, two)
        assert fingerprint(a) == fingerprint(build(tmp_path / "c.sqlite", ddl, one)), ddl


def test_an_item_of_a_source_is_named_in_this_family_once_per_state(tmp_path: Path) -> None:
    src = build(tmp_path / "shop.sqlite", TYPED, [(1, 9.99, "x"), (2, 5, None)])
    store = SQLiteSourceStore(tmp_path / "stores" / "sqlite")
    store.setup_session()
    item = store.provision(DatasetFiles("shop", parquet_dir=src, sqlite_path=src))
    try:
        logical = item.fingerprint().logical
        assert logical == fingerprint(src)
        con = connect_read_only(src)
        assert logical != sqlite_logical_fingerprint(con)  # the copies' sorted family
        con.close()
        cached = list((tmp_path / "stores" / "logical").iterdir())
        assert [p.name.startswith("sqlite-source-") for p in cached] == [True]
    finally:
        item.teardown()
        store.teardown_session()


def test_a_missing_or_unreadable_file_falls_back_to_the_sorted_rows(tmp_path: Path) -> None:
    assert duckdb_row_summaries(tmp_path / "missing.sqlite", ["t"]) == {}
