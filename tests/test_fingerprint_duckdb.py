"""The DuckDB logical fingerprint (`stores.engine.common.logical_fingerprint`) and its cache.

The fingerprint is computed inside DuckDB from a per-row hash; these properties pin what it must
see (any one cell changed: int, float, text, NULL vs 0 vs '', a type change such as 1 vs 1.0)
and what it must ignore (row order), on real DuckDB tables.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stores.base import DatasetFiles, ProvisionedStore, Store, StoreError
from stores.duckdb.store import DuckDBStore, ProvisionedDuckDB
from stores.engine.common import _LOGICAL_CACHE, logical_fingerprint
from stores.engine.views import ProvisionedViews
from stores.files.lake import LakeParquetStore
from stores.fingerprint import tree_sha256

COLUMNS = {"i": "BIGINT", "f": "DOUBLE", "s": "VARCHAR"}
ints = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))
floats = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=True))
texts = st.one_of(st.none(), st.text(max_size=8))
rows_strategy = st.lists(st.tuples(ints, floats, texts), min_size=1, max_size=12)
SPECIAL: dict[str, list[Any]] = {
    "i": [None, 0, 1, -1],
    "f": [None, 0.0, 1.0, -1.5],
    "s": [None, "", "0", "1"],
}


def fingerprint_of(rows: list[tuple[Any, ...]], types: dict[str, str] = COLUMNS) -> str:
    """The fingerprint of an in-memory database holding `rows` as table `t` (plus a fixed `u`)."""
    with duckdb.connect() as conn:
        cols = ", ".join(f"{name} {kind}" for name, kind in types.items())
        conn.execute(f"CREATE TABLE t ({cols})")
        conn.execute("CREATE TABLE u AS SELECT 1 AS k")
        if rows:
            marks = ", ".join("?" * len(types))
            conn.executemany(f"INSERT INTO t VALUES ({marks})", rows)
        return logical_fingerprint(conn)


def same_cell(a: Any, b: Any) -> bool:
    """Equal as SQL stores them (`-0.0 == 0.0` and both hash alike; NULL only equals NULL)."""
    return (a is None) == (b is None) and a == b


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_strategy, data=st.data())
def test_any_one_cell_change_changes_the_fingerprint(
    rows: list[tuple[Any, ...]], data: Any
) -> None:
    r = data.draw(st.integers(0, len(rows) - 1), label="row")
    c = data.draw(st.integers(0, 2), label="column")
    name = list(COLUMNS)[c]
    pool = [ints, floats, texts][c]
    new = data.draw(st.one_of(pool, st.sampled_from(SPECIAL[name])), label="new value")
    if same_cell(rows[r][c], new):
        return
    changed = list(rows)
    changed[r] = (*rows[r][:c], new, *rows[r][c + 1 :])
    assert fingerprint_of(changed) != fingerprint_of(rows)


@settings(max_examples=40, deadline=None)
@given(rows=rows_strategy, data=st.data())
def test_row_order_does_not_change_the_fingerprint(rows: list[tuple[Any, ...]], data: Any) -> None:
    shuffled = data.draw(st.permutations(rows), label="order")
    assert fingerprint_of(list(shuffled)) == fingerprint_of(rows)


@pytest.mark.parametrize(
    ("column", "before", "after"),
    [
        ("i", None, 0),
        ("s", None, ""),
        ("s", "", "0"),
        ("f", None, 0.0),
        ("i", 1, 2),
        ("f", 0.5, 0.25),
    ],
)
def test_null_zero_and_empty_text_are_told_apart(column: str, before: Any, after: Any) -> None:
    base = {"i": 7, "f": 2.5, "s": "x"}
    one, two = dict(base, **{column: before}), dict(base, **{column: after})
    assert fingerprint_of([tuple(one.values())]) != fingerprint_of([tuple(two.values())])
    assert fingerprint_of([tuple(one.values())]) == fingerprint_of([tuple(dict(one).values())])


def test_one_and_one_point_zero_differ_by_type() -> None:
    as_int = fingerprint_of([(1,)], {"v": "BIGINT"})
    assert as_int != fingerprint_of([(1.0,)], {"v": "DOUBLE"})
    assert as_int != fingerprint_of([(1,)], {"v": "DECIMAL(12,2)"})
    assert as_int != fingerprint_of([("1",)], {"v": "VARCHAR"})
    assert as_int == fingerprint_of([(1,)], {"v": "BIGINT"})


def test_duplicate_rows_count_and_columns_are_named() -> None:
    rows = [(1, 1.0, "a")]
    assert fingerprint_of(rows * 2) != fingerprint_of(rows)
    assert fingerprint_of([(0, 0.0, None)] * 2) != fingerprint_of([(0, 0.0, None)])
    renamed = {"j": "BIGINT", "f": "DOUBLE", "s": "VARCHAR"}
    assert fingerprint_of(rows, renamed) != fingerprint_of(rows)
    assert fingerprint_of([], COLUMNS) != fingerprint_of(rows)


def test_values_swapped_between_rows_or_columns_are_seen() -> None:
    assert fingerprint_of([(1, 0.0, "a"), (2, 0.0, "b")]) != fingerprint_of(
        [(2, 0.0, "a"), (1, 0.0, "b")]
    )
    two = {"a": "BIGINT", "b": "BIGINT"}
    assert fingerprint_of([(1, 2)], two) != fingerprint_of([(2, 1)], two)


@pytest.fixture
def dataset(tmp_path: Path) -> DatasetFiles:
    parquet = tmp_path / "parquet"
    parquet.mkdir()
    pq.write_table(pa.table({"id": [1, 2, 3], "name": ["a", None, ""]}), parquet / "t.parquet")
    return DatasetFiles(name="tiny", parquet_dir=parquet)


def tamper(item: ProvisionedStore) -> None:
    """Turn the empty name into NULL behind the store's back."""
    if isinstance(item, ProvisionedViews):
        target = item.root / "data" / "t.parquet"
        target.chmod(0o644)
        pq.write_table(pa.table({"id": [1, 2, 3], "name": ["a", None, None]}), target)
        return
    assert isinstance(item, ProvisionedDuckDB)
    target = item.root / "store.duckdb"
    target.chmod(0o644)
    with duckdb.connect(str(target)) as conn:
        conn.execute("UPDATE t SET name = NULL WHERE name = ''")


@pytest.mark.parametrize("store_class", [DuckDBStore, LakeParquetStore])
def test_cache_serves_identical_bytes_and_misses_on_a_change(
    store_class: type[Store], dataset: DatasetFiles, tmp_path: Path
) -> None:
    store = store_class(tmp_path / "work")
    store.setup_session()
    item, twin = store.provision(dataset), store.provision(dataset)
    try:
        first = item.fingerprint()
        assert _LOGICAL_CACHE[first.physical] == first.logical
        assert item.fingerprint() == first
        assert twin.fingerprint().logical == first.logical
        tamper(item)
        changed = item.fingerprint()
        assert changed.physical != first.physical
        assert changed.logical != first.logical
    finally:
        item.teardown()
        twin.teardown()
    with pytest.raises(StoreError, match="torn down"):
        item.fingerprint()


def test_an_untouched_folder_copy_is_not_read_again(
    dataset: DatasetFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lake-parquet item's files are recognised by their stat after provisioning: the
    fingerprints before and after a trial read none of them, and give the exact tree hash."""
    store = LakeParquetStore(tmp_path / "work")
    store.setup_session()
    item = store.provision(dataset)
    read: list[Path] = []

    def recording(path: Path) -> str:
        read.append(path)
        return hashlib.sha256(path.read_bytes()).hexdigest()

    for module in ("stores.fingerprint", "stores.common.pristine"):
        monkeypatch.setattr(f"{module}.file_sha256", recording)
    try:
        first = item.fingerprint()
        assert item.fingerprint() == first
        assert read == []
        assert first.physical == tree_sha256(item.root)
    finally:
        item.teardown()


def test_a_folder_copy_written_with_mode_and_mtime_put_back_is_hashed(
    dataset: DatasetFiles, tmp_path: Path
) -> None:
    """A write that restores the copy's mode and mtime afterwards still moves its ctime, so the
    file is read again and the fingerprint moves."""
    store = LakeParquetStore(tmp_path / "work")
    store.setup_session()
    item = store.provision(dataset)
    try:
        before = item.fingerprint()
        target = item.root / "data" / "t.parquet"
        state = target.stat()
        tamper(item)
        target.chmod(0o444)
        os.utime(target, ns=(state.st_atime_ns, state.st_mtime_ns))
        assert target.stat().st_mtime_ns == state.st_mtime_ns
        after = item.fingerprint()
        assert after.physical == tree_sha256(item.root) != before.physical
        assert after.logical != before.logical
    finally:
        item.teardown()
