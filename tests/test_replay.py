"""Ambient replay: snapshots are deterministic, hide the future, carry the declared plants, and
the level-6 scenarios' alerts fire exactly where a plant is declared."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_backintel.scenario import Scenario
from scenarios.olist.generator import OlistConfig, generate
from scenarios.references import (
    DEFINITIONS_DIR,
    build_all,
    load_references,
    load_scenarios,
    references_path,
)
from scenarios.replay.oracles import ORACLES
from scenarios.replay.world import (
    FMT,
    PLANTS,
    SNAPSHOTS,
    OlistReplayWorld,
    Tables,
    as_of,
    build_replay,
    plant,
    snapshot_named,
)
from scenarios.worlds import DATA_DIR_ENV, get_world
from stores.base import DatasetFiles

LEVEL6 = DEFINITIONS_DIR / "level6"
TIMESTAMPS = (
    "order_purchase_timestamp",
    "order_approved_at",
    "order_delivered_carrier_date",
    "order_delivered_customer_date",
)


@pytest.fixture(scope="module")
def world() -> OlistReplayWorld:
    return OlistReplayWorld()


@pytest.fixture(scope="module")
def unplanted() -> Tables:
    return generate(OlistConfig())


@pytest.fixture(scope="module")
def replay_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("replay")


@pytest.fixture(scope="module")
def built(replay_root: Path) -> dict[str, DatasetFiles]:
    return build_replay(replay_root)


@pytest.fixture(scope="module")
def scenarios() -> list[Scenario]:
    return load_scenarios(LEVEL6)


# -- what a snapshot may show -----------------------------------------------------------------
def _status_time(o: dict[str, Any]) -> str:
    """When an order's final status became known (the rule stated in scenarios/replay/world.py)."""
    status, purchase = o["order_status"], o["order_purchase_timestamp"]
    if status == "delivered":
        return str(o["order_delivered_customer_date"] or o["order_estimated_delivery_date"])
    if status == "shipped":
        return str(o["order_delivered_carrier_date"])
    if status in ("canceled", "unavailable"):
        return max(str(o[c]) for c in TIMESTAMPS if o[c] is not None)
    if status in ("approved", "invoiced", "processing"):
        return str(o["order_approved_at"] or purchase)
    return str(purchase)


def _expected_order(o: dict[str, Any], cut: str) -> dict[str, Any]:
    seen = {c: o[c] if o[c] is not None and o[c] < cut else None for c in TIMESTAMPS}
    if _status_time(o) < cut:
        status = o["order_status"]
    elif seen["order_delivered_carrier_date"]:
        status = "shipped"
    elif seen["order_approved_at"]:
        status = "approved"
    else:
        status = "created"
    return {**o, **seen, "order_status": status}


def _rows(df: pl.DataFrame, key: list[str]) -> list[dict[str, Any]]:
    return df.sort(key).to_dicts()


def leaks(snap: Tables, truth: Tables, cutoff: datetime) -> list[str]:
    """Everything wrong with `snap` as the world known at `cutoff` (empty when right): a value
    observed at or after the cutoff, or a value observed before it that is missing."""
    cut = cutoff.strftime(FMT)
    visible = truth["orders"].filter(pl.col("order_purchase_timestamp") < cut)
    expected = pl.DataFrame(
        [_expected_order(o, cut) for o in visible.iter_rows(named=True)], schema=visible.schema
    )
    problems = []
    if _rows(snap["orders"], ["order_id"]) != _rows(expected, ["order_id"]):
        problems.append("orders: a status or timestamp differs from what was known then")
    ids = expected["order_id"].implode()
    answered = truth["order_reviews"].filter(
        pl.col("order_id").is_in(ids) & (pl.col("review_answer_timestamp") < cut)
    )
    if _rows(snap["order_reviews"], ["review_id", "order_id"]) != _rows(
        answered, ["review_id", "order_id"]
    ):
        problems.append("order_reviews: not exactly the reviews answered before the cutoff")
    for table, key in (("order_items", "order_item_id"), ("order_payments", "payment_sequential")):
        want = truth[table].filter(pl.col("order_id").is_in(ids))
        if _rows(snap[table], ["order_id", key]) != _rows(want, ["order_id", key]):
            problems.append(f"{table}: not exactly the rows of the visible orders")
    want = truth["customers"].filter(pl.col("customer_id").is_in(expected["customer_id"].implode()))
    if _rows(snap["customers"], ["customer_id"]) != _rows(want, ["customer_id"]):
        problems.append("customers: not exactly the customers of the visible orders")
    return problems


CUTOFFS = st.datetimes(min_value=datetime(2016, 10, 1), max_value=datetime(2018, 10, 17)).map(
    lambda d: d.replace(microsecond=0)
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cutoff=CUTOFFS)
def test_a_cutoff_shows_exactly_what_was_known_before_it(
    world: OlistReplayWorld, cutoff: datetime
) -> None:
    assert leaks(as_of(world.truth, cutoff), world.truth, cutoff) == []


def test_the_leak_check_rejects_future_observations(world: OlistReplayWorld) -> None:
    cutoff = snapshot_named("delivery-2018-07-01").cutoff
    snap = as_of(world.truth, cutoff)
    assert leaks(snap, world.truth, cutoff) == []
    assert leaks(world.truth, world.truth, cutoff)  # the whole extract is a leak
    later = as_of(world.truth, snapshot_named("delivery-2018-07-08").cutoff)
    assert leaks(later, world.truth, cutoff)
    pending = snap["orders"].filter(pl.col("order_status") == "shipped")["order_id"][0]
    final = world.truth["orders"].filter(pl.col("order_id") == pending)["order_status"].item()
    leaked = dict(snap)
    leaked["orders"] = snap["orders"].with_columns(
        pl.when(pl.col("order_id") == pending)
        .then(pl.lit(final))
        .otherwise(pl.col("order_status"))
        .alias("order_status")
    )
    assert final == "delivered"
    assert leaks(leaked, world.truth, cutoff) == [
        "orders: a status or timestamp differs from what was known then"
    ]
    answered_later = dict(snap)
    answered_later["order_reviews"] = snap["order_reviews"].head(-1)
    assert leaks(answered_later, world.truth, cutoff)


@pytest.mark.parametrize("name", [s.name for s in SNAPSHOTS])
def test_each_built_snapshot_hides_its_future(
    world: OlistReplayWorld, built: dict[str, DatasetFiles], name: str
) -> None:
    files = built[name]
    snap = {p.stem: pl.read_parquet(p) for p in files.parquet_dir.glob("*.parquet")}
    assert leaks(snap, world.truth, snapshot_named(name).cutoff) == []


# -- determinism and the world registry -------------------------------------------------------
def test_two_builds_give_the_same_hashes_and_match_the_references(
    world: OlistReplayWorld, built: dict[str, DatasetFiles], tmp_path: Path
) -> None:
    again = build_replay(tmp_path)
    hashes = {name: world.data_hash(files) for name, files in built.items()}
    assert hashes == {name: world.data_hash(files) for name, files in again.items()}
    assert len(set(hashes.values())) == len(SNAPSHOTS)  # every snapshot differs from the others
    for name, digest in hashes.items():
        assert load_references(references_path("olist-replay", name)).data_hash == digest


def test_a_built_snapshot_is_reused_not_rebuilt(
    built: dict[str, DatasetFiles], replay_root: Path
) -> None:
    files = built["repeat-2017q3"]
    assert files.sqlite_path is not None
    before = files.sqlite_path.stat().st_mtime_ns
    again = OlistReplayWorld().ensure_built(replay_root, "repeat-2017q3")
    assert again.sqlite_path == files.sqlite_path
    assert files.sqlite_path.stat().st_mtime_ns == before


def test_the_world_is_registered_with_one_snapshot_per_cutoff(tmp_path: Path) -> None:
    world = get_world("olist-replay")
    assert world.snapshots == tuple(s.name for s in SNAPSHOTS)
    assert {s.review for s in SNAPSHOTS} == {"delivery", "repeat", "weekly"}
    with pytest.raises(ValueError, match="delivery-2018-06-01"):
        world.ensure_built(tmp_path, "delivery-2018-13")
    with pytest.raises(ValueError, match="declared: delivery-2018-06-01"):
        snapshot_named("weekly-2018-w99")


def test_references_are_up_to_date(built: dict[str, DatasetFiles], replay_root: Path) -> None:
    build_all(write=False, definitions=LEVEL6, data_root=replay_root)


# -- plants -------------------------------------------------------------------------------------
def _changed(before: pl.DataFrame, after: pl.DataFrame, key: list[str]) -> set[tuple[Any, ...]]:
    diff = after.join(before, on=after.columns, how="anti", nulls_equal=True)
    return set(diff.select(key).iter_rows())


def _purchased(t: Tables, start: str, end: str) -> set[str]:
    p = pl.col("order_purchase_timestamp")
    return set(t["orders"].filter((p >= start) & (p < end))["order_id"])


def test_plants_change_only_what_they_declare(world: OlistReplayWorld, unplanted: Tables) -> None:
    truth = world.truth
    orders = _changed(unplanted["orders"], truth["orders"], ["order_id"])
    reviews = _changed(unplanted["order_reviews"], truth["order_reviews"], ["order_id"])
    items = _changed(unplanted["order_items"], truth["order_items"], ["order_id"])
    customers = _changed(unplanted["customers"], truth["customers"], ["customer_id"])
    june = _purchased(truth, "2018-06-10 00:00:00", "2018-07-01 00:00:00")
    assert orders
    assert {o for (o,) in orders} <= june
    assert reviews
    assert {o for (o,) in reviews} <= june
    delivered = pl.col("order_delivered_customer_date")
    week22 = truth["orders"].filter((delivered >= "2018-05-28") & (delivered < "2018-06-04"))
    assert items
    assert {o for (o,) in items} <= set(week22["order_id"])
    q4 = truth["orders"].filter(pl.col("order_id").is_in(_purchased(truth, "2017-10", "2018-01")))
    assert customers
    assert {c for (c,) in customers} <= set(q4["customer_id"])
    for table in ("order_payments", "products", "sellers", "product_category_name_translation"):
        assert truth[table].equals(unplanted[table])


def test_the_diff_check_rejects_an_undeclared_change(unplanted: Tables) -> None:
    shifted = unplanted["orders"].with_columns(
        pl.lit("2017-01-01 00:00:00").alias("order_approved_at")
    )
    assert _changed(unplanted["orders"], shifted, ["order_id"])
    assert not _changed(unplanted["orders"], unplanted["orders"], ["order_id"])


def _alert(tables: Tables, snap: str, tmp: Path) -> int:
    folder = tmp / snap
    folder.mkdir(parents=True)
    for name, df in as_of(tables, snapshot_named(snap).cutoff).items():
        df.write_parquet(folder / f"{name}.parquet")
    values = ORACLES[f"l6_{snap.replace('-', '_')}"](folder)
    return int(values["alert"])


@pytest.mark.parametrize("declared", PLANTS, ids=lambda p: p.snapshot)
def test_each_plant_turns_its_snapshot_from_stable_to_alert(
    declared: Any, unplanted: Tables, tmp_path: Path
) -> None:
    assert snapshot_named(declared.snapshot).review == declared.review
    assert _alert(unplanted, declared.snapshot, tmp_path / "stable") == 0
    assert _alert(plant(unplanted, (declared,)), declared.snapshot, tmp_path / "shifted") == 1


def test_alerts_fire_exactly_at_the_declared_snapshots(scenarios: list[Scenario]) -> None:
    alerts = {}
    for scenario in scenarios:
        if scenario.answerable:
            refs = load_references(references_path("olist-replay", scenario.dataset.snapshot))
            alerts[scenario.dataset.snapshot] = refs.references[scenario.id]["values"]["alert"]
    planted = {p.snapshot for p in PLANTS}
    assert planted <= set(alerts)
    assert {snap for snap, alert in alerts.items() if alert == 1} == planted
    for review in ("delivery", "repeat", "weekly"):
        runs = sorted((s.cutoff, alerts[s.name]) for s in SNAPSHOTS if s.review == review)
        first = [a for _, a in runs].index(1)
        assert first > 0, f"{review}: no earlier run without the evidence"
        assert runs[first - 1][1] == 0


def test_delayed_deliveries_are_pending_at_the_first_cutoff(world: OlistReplayWorld) -> None:
    first = as_of(world.truth, snapshot_named("delivery-2018-07-01").cutoff)["orders"]
    follow = as_of(world.truth, snapshot_named("delivery-2018-07-08").cutoff)["orders"]
    june = pl.col("order_purchase_timestamp").is_between(
        pl.lit("2018-06-10"), pl.lit("2018-07-01"), closed="left"
    )
    delivered = pl.col("order_status") == "delivered"
    assert first.filter(june & delivered).height < follow.filter(june & delivered).height


# -- scenarios ----------------------------------------------------------------------------------
def test_scenarios_cover_every_review(scenarios: list[Scenario]) -> None:
    assert len(scenarios) >= 8
    assert all(s.level == 6 and s.dataset.world == "olist-replay" for s in scenarios)
    declared = {s.name for s in SNAPSHOTS}
    assert {s.dataset.snapshot for s in scenarios} == declared
    assert sum(not s.answerable for s in scenarios) >= 1


@pytest.mark.parametrize(
    ("snap", "start", "end"),
    [
        ("delivery-2018-07-01", "2018-07-01", "2018-08-01"),
        ("repeat-2017q4", "2018-01-01", "2018-04-01"),
    ],
)
def test_unanswerable_periods_are_entirely_unobserved(
    scenarios: list[Scenario], built: dict[str, DatasetFiles], snap: str, start: str, end: str
) -> None:
    assert any(not s.answerable and s.dataset.snapshot == snap for s in scenarios)
    orders = pl.read_parquet(built[snap].parquet_dir / "orders.parquet")
    p = pl.col("order_purchase_timestamp")
    assert orders.filter((p >= start) & (p < end)).height == 0
    assert orders.filter(p < start).height > 0


# -- docs -----------------------------------------------------------------------------------------
def test_docs_example_runs(
    built: dict[str, DatasetFiles],
    replay_root: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = (Path(__file__).parent.parent / "docs" / "replay.md").read_text(encoding="utf-8")
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv(DATA_DIR_ENV, str(replay_root))
    exec(compile(block, "docs/replay.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{p.review} {p.snapshot} alert 1" for p in PLANTS]
