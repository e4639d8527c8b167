"""The Olist-shaped world: determinism, referential integrity, planted mess, the on-disk build."""

from __future__ import annotations

import json
import sqlite3
import tempfile
import threading
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scenarios.olist import generator
from scenarios.olist.generator import OlistConfig, _generate, generate
from scenarios.olist.world import OlistWorld
from scenarios.worlds import (
    COMPLETE_MARKER,
    UnknownWorldError,
    content_hash,
    data_dir,
    get_world,
)

Tables = dict[str, pl.DataFrame]
FMT = "%Y-%m-%d %H:%M:%S"
TIMESTAMP_COLUMNS = {
    "orders": [
        "order_purchase_timestamp",
        "order_approved_at",
        "order_delivered_carrier_date",
        "order_delivered_customer_date",
        "order_estimated_delivery_date",
    ],
    "order_items": ["shipping_limit_date"],
    "order_reviews": ["review_creation_date", "review_answer_timestamp"],
}


def _missing_refs(child: pl.DataFrame, col: str, parent: pl.DataFrame, pcol: str) -> int:
    return child.join(parent, left_on=col, right_on=pcol, how="anti").height


def violations(t: Tables) -> list[str]:
    """Every broken invariant and every kind of planted mess that is absent."""
    out: list[str] = []
    o, items, cust = t["orders"], t["order_items"], t["customers"]
    reviews, products, trans = (
        t["order_reviews"],
        t["products"],
        t["product_category_name_translation"],
    )
    refs = [
        ("order_items", items, "order_id", o, "order_id"),
        ("order_items", items, "product_id", products, "product_id"),
        ("order_items", items, "seller_id", t["sellers"], "seller_id"),
        ("orders", o, "customer_id", cust, "customer_id"),
        ("order_payments", t["order_payments"], "order_id", o, "order_id"),
        ("order_reviews", reviews, "order_id", o, "order_id"),
    ]
    for name, child, col, parent, pcol in refs:
        if n := _missing_refs(child, col, parent, pcol):
            out.append(f"{name}.{col}: {n} rows reference nothing")
    keys = {
        "orders": ["order_id"],
        "customers": ["customer_id"],
        "order_items": ["order_id", "order_item_id"],
        "order_payments": ["order_id", "payment_sequential"],
        "order_reviews": ["review_id", "order_id"],
        "products": ["product_id"],
        "sellers": ["seller_id"],
    }
    for table, key in keys.items():
        if t[table].select(key).is_duplicated().any():
            out.append(f"{table}: duplicate key {key}")
    for table, cols in TIMESTAMP_COLUMNS.items():
        for col in cols:
            parsed = t[table][col].str.to_datetime(FMT, strict=False)
            if (parsed.is_null() & t[table][col].is_not_null()).any():
                out.append(f"{table}.{col}: a value is not 'YYYY-MM-DD HH:MM:SS'")
    for col in ("price", "freight_value"):
        cents = items[col] * 100
        if ((cents - cents.round(0)).abs() > 1e-6).any():
            out.append(f"order_items.{col}: more than two decimals")
    statuses = set(o["order_status"])
    want = {"delivered", "shipped", "canceled", "unavailable", "invoiced", "processing", "created"}
    if missing := sorted(want - statuses):
        out.append(f"statuses absent: {missing}")
    delivered = o.filter(pl.col("order_status") == "delivered")
    if delivered.join(items, on="order_id", how="anti").height:
        out.append("a delivered order has no items")
    if not delivered["order_delivered_customer_date"].is_null().any():
        out.append("no delivered order without a delivery timestamp")
    canceled_2018 = o.filter(
        (pl.col("order_status") == "canceled")
        & pl.col("order_purchase_timestamp").str.starts_with("2018")
    )
    if canceled_2018.height == 0:
        out.append("no canceled order purchased in 2018")
    per_order = reviews.group_by("order_id").len()
    if not (per_order["len"] > 1).any():
        out.append("no order with several reviews")
    if delivered.join(reviews, on="order_id", how="anti").height == 0:
        out.append("no delivered order without a review")
    if not reviews.group_by("review_id").agg(pl.col("order_id").n_unique() > 1)["order_id"].any():
        out.append("no review id shared by two orders")
    cats = products["product_category_name"]
    if not cats.is_null().any():
        out.append("no product without a category")
    untranslated = products.filter(
        pl.col("product_category_name").is_not_null()
        & ~pl.col("product_category_name").is_in(trans["product_category_name"].implode())
    )
    if items.join(untranslated, on="product_id", how="semi").height == 0:
        out.append("no item in an untranslated category")
    persons = cust.group_by("customer_unique_id").len()
    if not (persons["len"] > 1).any():
        out.append("no person with several customer ids")
    first = str(o["order_purchase_timestamp"].min())
    last = str(o["order_purchase_timestamp"].max())
    if not (first.startswith("2016-09") and last.startswith("2018-10")):
        out.append(f"purchases span {first}..{last}, not 2016-09..2018-10")
    return out


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), orders=st.integers(60, 400))
def test_generator_is_deterministic_and_planted_mess_is_present(seed: int, orders: int) -> None:
    config = OlistConfig(seed=seed, orders=orders)
    first, second = _generate(config), _generate(config)  # uncached: two real generations
    assert sorted(first) == sorted(second)
    for name in first:
        assert first[name].equals(second[name]), name
    assert first["orders"].height == orders
    assert violations(first) == []


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), orders=st.integers(60, 200))
def test_two_builds_of_one_config_have_the_same_data_hash(seed: int, orders: int) -> None:
    world = OlistWorld(OlistConfig(seed=seed, orders=orders))
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        first, second = world.ensure_built(Path(a)), world.ensure_built(Path(b))
        assert world.data_hash(first) == world.data_hash(second)
        for table in first.tables:
            assert pl.read_parquet(first.parquet_dir / f"{table}.parquet").equals(
                pl.read_parquet(second.parquet_dir / f"{table}.parquet")
            )


def test_generate_is_cached_per_config_and_gives_the_uncached_frames(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[OlistConfig] = []

    def counted(config: OlistConfig) -> dict[str, pl.DataFrame]:
        calls.append(config)
        return _generate(config)

    monkeypatch.setattr(generator, "_generate", counted)
    monkeypatch.setattr(generator, "_CACHE", type(generator._CACHE)())
    config = OlistConfig(seed=11, orders=90)
    first, second = generate(config), generate(config)
    assert calls == [config]  # the second call did not generate again
    fresh = _generate(config)
    assert sorted(first) == sorted(second) == sorted(fresh)
    assert all(first[t].equals(fresh[t]) and second[t].equals(fresh[t]) for t in fresh)
    first["orders"] = first["orders"].head(1)  # a caller's own dict: the cache is untouched
    del first["sellers"]
    third = generate(config)
    assert calls == [config]
    assert sorted(third) == sorted(fresh)
    assert third["orders"].equals(fresh["orders"])
    assert third["orders"].height == 90
    others = [OlistConfig(seed=s, orders=60) for s in range(generator.CACHED_CONFIGS)]
    for other in others:
        generate(other)
    generate(config)  # the oldest config was dropped: generated again
    assert calls == [config, *others, config]


def test_different_seeds_give_different_data() -> None:
    a, b = generate(OlistConfig(seed=1, orders=80)), generate(OlistConfig(seed=2, orders=80))
    assert not a["orders"].equals(b["orders"])


def test_invariant_check_rejects_broken_worlds() -> None:
    good = generate(OlistConfig(seed=7, orders=80))
    assert violations(good) == []
    orphan = dict(good)
    orphan["order_items"] = good["order_items"].with_columns(
        pl.when(pl.int_range(pl.len()) == 0)
        .then(pl.lit("no-such-product"))
        .otherwise(pl.col("product_id"))
        .alias("product_id")
    )
    assert any("product_id" in v for v in violations(orphan))
    single = dict(good)
    single["customers"] = good["customers"].with_columns(
        pl.col("customer_id").alias("customer_unique_id")
    )
    assert "no person with several customer ids" in violations(single)
    clean = dict(good)
    clean["order_reviews"] = good["order_reviews"].unique("order_id", keep="first").sort("order_id")
    assert "no order with several reviews" in violations(clean)
    bad_price = dict(good)
    bad_price["order_items"] = good["order_items"].with_columns(pl.col("price") + 0.001)
    assert any("two decimals" in v for v in violations(bad_price))


def test_config_validation_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="at least 60"):
        OlistConfig(orders=10)
    monkeypatch.setenv("BACKINTEL_OLIST_ORDERS", "250")
    assert OlistConfig.from_env() == OlistConfig(orders=250)
    assert get_world("olist").config["orders"] == 250
    monkeypatch.setenv("BACKINTEL_OLIST_ORDERS", "lots")
    with pytest.raises(ValueError, match="BACKINTEL_OLIST_ORDERS"):
        OlistConfig.from_env()
    monkeypatch.delenv("BACKINTEL_OLIST_ORDERS")
    assert get_world("olist").config == {"generator": 1, "orders": 4000, "seed": 20160904}


def test_unknown_world_names_the_closest_match() -> None:
    with pytest.raises(UnknownWorldError, match="Did you mean 'olist'"):
        get_world("olsit")


def test_data_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BACKINTEL_DATA_DIR", str(tmp_path))
    assert data_dir() == tmp_path.resolve()
    monkeypatch.delenv("BACKINTEL_DATA_DIR")
    assert data_dir().name == "data"


@pytest.fixture(scope="module")
def small_world() -> OlistWorld:
    return OlistWorld(OlistConfig(seed=11, orders=150))


def test_two_builds_have_identical_content_and_hash(
    small_world: OlistWorld, tmp_path: Path
) -> None:
    a = small_world.ensure_built(tmp_path / "a")
    b = small_world.ensure_built(tmp_path / "b")
    assert a.tables == b.tables == sorted(small_world.generate("base"))
    for table in a.tables:
        assert pl.read_parquet(a.parquet_dir / f"{table}.parquet").equals(
            pl.read_parquet(b.parquet_dir / f"{table}.parquet")
        )
    assert small_world.data_hash(a) == small_world.data_hash(b)
    other = OlistWorld(OlistConfig(seed=12, orders=150)).ensure_built(tmp_path / "a")
    assert other.parquet_dir != a.parquet_dir
    assert content_hash(other.parquet_dir) != content_hash(a.parquet_dir)


def test_the_run_that_builds_a_world_does_not_hash_it_again(
    small_world: OlistWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = small_world.ensure_built(tmp_path)
    manifest = json.loads((files.parquet_dir.parent / COMPLETE_MARKER).read_text())

    def again(parquet_dir: Path) -> str:
        raise AssertionError(f"{parquet_dir} hashed again")

    monkeypatch.setattr("scenarios.world_base.content_hash", again)
    assert small_world.data_hash(files) == manifest["data_hash"]


def test_data_hash_is_over_content_not_file_bytes(small_world: OlistWorld, tmp_path: Path) -> None:
    files = small_world.ensure_built(tmp_path)
    before = small_world.data_hash(files)
    path = files.parquet_dir / "orders.parquet"
    df = pl.read_parquet(path)
    df.reverse().write_parquet(path, compression="gzip", row_group_size=7)
    assert small_world.data_hash(files) == before
    df.with_columns(
        pl.when(pl.int_range(pl.len()) == 0)
        .then(pl.lit("shipped"))
        .otherwise(pl.col("order_status"))
        .alias("order_status")
    ).write_parquet(path)
    assert small_world.data_hash(files) != before


def test_sqlite_build_has_types_keys_and_the_same_rows(
    small_world: OlistWorld, tmp_path: Path
) -> None:
    files = small_world.ensure_built(tmp_path)
    assert files.sqlite_path is not None
    con = sqlite3.connect(files.sqlite_path)
    try:
        for table in files.tables:
            n = con.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0]
            assert n == pl.read_parquet(files.parquet_dir / f"{table}.parquet").height, table
        info = {r[1]: (r[2], r[5]) for r in con.execute("PRAGMA table_info(order_items)")}
        assert info["order_id"] == ("TEXT", 1)
        assert info["order_item_id"] == ("INTEGER", 2)
        assert info["price"] == ("REAL", 0)
        with pytest.raises(sqlite3.IntegrityError):
            con.execute("INSERT INTO orders (order_id) SELECT order_id FROM orders LIMIT 1")
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []
        ts = con.execute("SELECT order_purchase_timestamp FROM orders LIMIT 1").fetchone()[0]
        assert isinstance(ts, str)
        assert datetime.strptime(ts, FMT)
    finally:
        con.close()


def test_concurrent_builds_share_one_build(small_world: OlistWorld, tmp_path: Path) -> None:
    calls: list[int] = []
    original = small_world.generate

    def counting(snapshot: str) -> dict[str, pl.DataFrame]:
        calls.append(1)
        return original(snapshot)

    world = OlistWorld(small_world.olist_config)
    world.generate = counting  # type: ignore[method-assign]
    results: list[Path] = []

    def build() -> None:
        results.append(world.ensure_built(tmp_path).parquet_dir)

    threads = [threading.Thread(target=build) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(calls) == 1
    assert len(set(results)) == 1
    assert [p.name for p in (tmp_path / "worlds").iterdir() if ".tmp-" in p.name] == []


def test_half_built_folders_are_never_used(small_world: OlistWorld, tmp_path: Path) -> None:
    final = small_world.build_dir(tmp_path)
    (final / "parquet").mkdir(parents=True)  # an interrupted build without the marker
    (final / "parquet" / "orders.parquet").write_bytes(b"garbage")
    files = small_world.ensure_built(tmp_path)
    assert (final / COMPLETE_MARKER).is_file()
    assert pl.read_parquet(files.parquet_dir / "orders.parquet").height == 150

    broken = OlistWorld(OlistConfig(seed=13, orders=150))

    def failing(snapshot: str) -> dict[str, pl.DataFrame]:
        raise RuntimeError("generator crashed")

    broken.generate = failing  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="crashed"):
        broken.ensure_built(tmp_path)
    assert not broken.build_dir(tmp_path).exists()
    assert [p for p in (tmp_path / "worlds").iterdir() if ".tmp-" in p.name] == []


def test_unknown_snapshot_is_refused(small_world: OlistWorld, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="available: base"):
        small_world.ensure_built(tmp_path, snapshot="2018-03")
