"""How long one item's sqlite store takes to provision and tear down (target: well under 20 ms)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from stores.base import DatasetFiles
from stores.sqlite.store import SQLiteStore

pytestmark = pytest.mark.benchmark


@pytest.fixture
def few_mb_dataset(tmp_path: Path) -> DatasetFiles:
    """About 4 MB of orders-like rows."""
    path = tmp_path / "bench.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE orders (id INTEGER, customer TEXT, amount REAL, placed TEXT)")
    conn.executemany(
        "INSERT INTO orders VALUES (?, ?, ?, ?)",
        (
            (i, f"customer-{i % 997:05d}", i * 0.37, f"2018-{1 + i % 12:02d}-01")
            for i in range(80_000)
        ),
    )
    conn.commit()
    conn.close()
    assert path.stat().st_size > 2_000_000
    return DatasetFiles("bench", tmp_path, sqlite_path=path)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    backend = SQLiteStore(tmp_path / "work")
    backend.setup_session()
    yield backend
    backend.teardown_session()


def test_provision_and_teardown(
    benchmark: BenchmarkFixture, store: SQLiteStore, few_mb_dataset: DatasetFiles
) -> None:
    def one_item() -> None:
        store.provision(few_mb_dataset).teardown()

    benchmark(one_item)
    assert list(store.workdir.glob("bi_*")) == []
    benchmark.extra_info["target_s"] = 0.020  # a target to read in the table, never asserted
