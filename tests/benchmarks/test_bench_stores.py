"""Provision + teardown of one item per backend (pytest-benchmark).

Targets: SQLite/DuckDB-backed stores under 20 ms, PostgreSQL and ClickHouse (chDB) under
200 ms, Iceberg on S3 (pyiceberg writes to a local moto server) under 2 s, on a two-table
dataset of a few hundred rows, with the per-session template already built.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stores.base import DatasetFiles, Store, StoreError
from stores.registry import UnknownStoreError, available_stores, load_store_class

pytestmark = pytest.mark.benchmark
TARGET_S = {"postgres": 0.200, "clickhouse": 0.200, "iceberg-s3": 2.0}
DEFAULT_TARGET_S = 0.020


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> DatasetFiles:
    root = tmp_path_factory.mktemp("bench-ds")
    n = 500
    pq.write_table(
        pa.table(
            {
                "id": pa.array(range(n), pa.int64()),
                "amount": pa.array([Decimal(i) / 100 for i in range(n)], pa.decimal128(10, 2)),
                "day": pa.array([date(2024, 1, 1) + timedelta(days=i % 90) for i in range(n)]),
                "note": [f"note {i} é" for i in range(n)],
            }
        ),
        root / "orders.parquet",
    )
    pq.write_table(pa.table({"k": list(range(20)), "v": ["x"] * 20}), root / "lookup.parquet")
    return DatasetFiles("bench", root)


@pytest.fixture(scope="module", params=available_stores())
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Store]:
    try:
        store = load_store_class(request.param)(tmp_path_factory.mktemp(f"bench-{request.param}"))
        store.setup_session()
    except (StoreError, UnknownStoreError, ImportError) as exc:
        pytest.skip(f"{request.param} cannot run here: {exc}")
    yield store
    store.teardown_session()


def test_provision_and_teardown(benchmark: Any, store: Store, dataset: DatasetFiles) -> None:
    store.provision(dataset).teardown()  # build the per-session template outside the timing

    def cycle() -> None:
        store.provision(dataset).teardown()

    benchmark.extra_info["target_s"] = TARGET_S.get(store.name, DEFAULT_TARGET_S)
    benchmark.pedantic(cycle, rounds=15, iterations=1, warmup_rounds=1)
