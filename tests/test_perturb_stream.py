"""A built world's perturbed copy written a batch of rows at a time (`evidence.perturb_stream`)
holds exactly the rows and notes of the same copy made in memory (`perturb.perturb_tables`),
whatever the batch and row-group sizes, for plain, moving and family probes."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_backintel.evidence.perturb import perturb_tables
from pytest_backintel.evidence.perturb_families import FAMILY_BASE
from pytest_backintel.evidence.perturb_stream import perturb_parquet

STATUSES = ["delivered", "shipped", "canceled", "pending"]


def _world(n_customers: int, n_orders: int, n_events: int, seed: int) -> dict[str, pl.DataFrame]:
    """Customers, their orders and order items (keys by name), a log with no key, and a
    table too small to drop rows from."""
    import random

    rng = random.Random(seed)
    customers = pl.DataFrame(
        {
            "customer_id": [f"c{i}" for i in range(n_customers)],
            "city": [rng.choice(["SP", "RJ", None]) for _ in range(n_customers)],
            "credit": pl.Series(
                [Decimal(rng.randint(0, 99_999)) / 100 for _ in range(n_customers)],
                dtype=pl.Decimal(9, 2),
            ),
        }
    )
    start = dt.date(2018, 1, 1)
    orders = pl.DataFrame(
        {
            "order_id": list(range(n_orders)),
            "customer_id": [f"c{rng.randrange(max(n_customers, 1))}" for _ in range(n_orders)],
            "status": [rng.choice(STATUSES) for _ in range(n_orders)],
            "bought": [start + dt.timedelta(days=rng.randrange(90)) for _ in range(n_orders)],
            "delivered_at": [
                f"2018-0{rng.randint(4, 9)}-1{rng.randint(0, 9)} 10:00:00" for _ in range(n_orders)
            ],
            "amount": [rng.uniform(1, 500) for _ in range(n_orders)],
            "parcels": [rng.randint(0, 5) for _ in range(n_orders)],
        }
    )
    items = pl.DataFrame(
        {
            "order_id": [rng.randrange(max(n_orders, 1)) for _ in range(2 * n_orders)],
            "product_id": [rng.randrange(7) for _ in range(2 * n_orders)],
            "price": pl.Series([rng.uniform(1, 50) for _ in range(2 * n_orders)], dtype=pl.Float32),
        }
    )
    events = pl.DataFrame(
        {
            "event": [rng.choice(["view", "cart", "buy"]) for _ in range(n_events)],
            "value": [rng.uniform(0, 9) for _ in range(n_events)],
        }
    )
    tiny = pl.DataFrame({"code": ["a", "b"], "rate": [0.5, 1.5]})
    return dict(customers=customers, orders=orders, items=items, events=events, tiny=tiny)


SALTS = st.one_of(
    st.tuples(st.integers(1, 10_000), st.none()),
    st.tuples(st.integers(1, 10_000), st.sampled_from([("delivered",), ("SP", "canceled")])),
    st.tuples(st.integers(0, 63).map(lambda a: FAMILY_BASE + 64 * 11 + a), st.just(("SP",))),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.tuples(st.integers(0, 60), st.integers(0, 300), st.integers(0, 200)),
    seed=st.integers(0, 1000),
    salt_moving=SALTS,
    row_group=st.integers(1, 70),
    batch_rows=st.integers(1, 150),
)
def test_the_streamed_copy_equals_the_copy_made_in_memory(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: tuple[int, int, int],
    seed: int,
    salt_moving: tuple[int, tuple[str, ...] | None],
    row_group: int,
    batch_rows: int,
) -> None:
    salt, moving = salt_moving
    tables = _world(*sizes, seed)
    src = tmp_path_factory.mktemp("src")
    for name, df in tables.items():
        df.write_parquet(src / f"{name}.parquet", row_group_size=row_group)
    expected_notes: list[str] = []
    expected = perturb_tables(tables, salt, notes=expected_notes, moving=moving)
    notes: list[str] = []
    dst = tmp_path_factory.mktemp("dst") / "copy"
    perturb_parquet(src, dst, salt, notes, moving, batch_rows=batch_rows)
    assert sorted(p.stem for p in dst.glob("*.parquet")) == sorted(tables)
    for name, want in expected.items():
        got = pl.read_parquet(dst / f"{name}.parquet")
        assert got.schema == want.schema, name
        assert got.equals(want), name
    assert notes == expected_notes


def test_a_copy_of_a_large_world_moves_rows_and_numbers_like_the_one_in_memory(
    tmp_path: Path,
) -> None:
    """Batches smaller than the tables: rows drop with their customer or order, amounts are
    rescaled by their position among the kept rows, as in memory (and not as in the source)."""
    tables = _world(300, 3000, 1000, seed=7)
    src = tmp_path / "src"
    src.mkdir()
    for name, df in tables.items():
        df.write_parquet(src / f"{name}.parquet", row_group_size=256)
    perturb_parquet(src, tmp_path / "copy", 1, batch_rows=500)
    got = pl.read_parquet(tmp_path / "copy" / "orders.parquet")
    want = perturb_tables(tables, 1)["orders"]
    assert 0 < got.height < tables["orders"].height
    assert got.equals(want)
    kept = tables["orders"].filter(pl.col("order_id").is_in(got["order_id"].implode()))
    assert (got["amount"] > kept["amount"]).all()
    assert got["customer_id"].is_in(want["customer_id"].implode()).all()


def test_the_memory_benchmark_compares_the_two_copies(tmp_path: Path) -> None:
    """`tests/benchmarks/perturb_memory.py` as docs/performance.md shows it, on TPC-H SF0.01."""
    import subprocess
    import sys

    script = Path(__file__).parent / "benchmarks" / "perturb_memory.py"
    cmd = [sys.executable, str(script), "--snapshot", "sf0.01", "--data", str(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "same rows in every table; peak memory ratio (stream / memory): " in done.stdout
    assert done.stdout.count(" MB") == 2
