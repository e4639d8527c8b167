"""Olist scenarios and their references: oracles agree with SQL, mismatches abort, the
committed references equal a fresh build and are refused for other data."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_backintel.scenario import MetricKind, Scenario, Split
from scenarios.olist.generator import OlistConfig
from scenarios.olist.oracles import ORACLES
from scenarios.olist.world import OlistWorld
from scenarios.references import (
    DEFINITIONS_DIR,
    REFERENCES_DIR,
    ReferenceMismatchError,
    ReferencesOutOfDateError,
    StaleReferencesError,
    build_all,
    build_references,
    load_references,
    load_scenarios,
    reference_for,
    references_path,
    render_references,
)
from stores.base import DatasetFiles

MODELINE = "# yaml-language-server: $schema=../../scenario.schema.json"


@pytest.fixture(scope="module")
def world() -> OlistWorld:
    return OlistWorld(OlistConfig())  # the committed config, whatever the environment says


@pytest.fixture(scope="module")
def files(world: OlistWorld, tmp_path_factory: pytest.TempPathFactory) -> DatasetFiles:
    return world.ensure_built(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def all_scenarios() -> list[Scenario]:
    return load_scenarios()


@pytest.fixture(scope="module")
def scenarios(all_scenarios: list[Scenario]) -> list[Scenario]:
    """The scenarios over the base Olist world (other worlds have their own tests)."""
    return [s for s in all_scenarios if s.dataset.world == "olist"]


def _by_id(scenarios: list[Scenario], sid: str) -> Scenario:
    return next(s for s in scenarios if s.id == sid)


def test_scenario_files_follow_the_conventions(all_scenarios: list[Scenario]) -> None:
    paths = sorted(DEFINITIONS_DIR.rglob("*.scenario.yaml"))
    assert len(paths) == len(all_scenarios) >= 73
    for path in paths:
        assert path.read_text().splitlines()[0] == MODELINE, path
        sid = path.name.removesuffix(".scenario.yaml")
        scenario = _by_id(all_scenarios, sid)
        assert path.parent.name == f"level{scenario.level}", path
        assert scenario.split is Split.DEVELOPMENT
        for metric in scenario.metrics:
            assert f"`{metric.name}`" in scenario.question, (sid, metric.name)
        tables = [m for m in scenario.metrics if m.kind is MetricKind.TABLE]
        assert not tables or len(scenario.metrics) == 1, sid
    unanswerable = [s for s in all_scenarios if not s.answerable]
    assert len(unanswerable) >= 10
    for s in unanswerable:
        assert s.refusal is not None
        assert f"`{s.refusal.forbidden_metric}`" in s.question
    kinds = {m.kind for s in all_scenarios for m in s.metrics}
    assert kinds == set(MetricKind)
    assert {s.level for s in all_scenarios} == {1, 2, 3, 4, 5, 6, 7, 8}


def test_every_answerable_scenario_has_exactly_one_oracle(scenarios: list[Scenario]) -> None:
    wanted = {s.oracle_name for s in scenarios if s.answerable}
    assert wanted == set(ORACLES)


def test_committed_references_equal_a_fresh_build(
    world: OlistWorld, files: DatasetFiles, scenarios: list[Scenario]
) -> None:
    doc = build_references(scenarios, world, files)
    committed = references_path("olist").read_text(encoding="utf-8")
    assert render_references(doc) == committed
    assert doc["config"] == {"generator": 1, "orders": 4000, "seed": 20160904}
    assert doc["data_hash"] == world.data_hash(files)
    for s in scenarios:
        entry = doc["references"][s.id]
        assert entry["version"] == s.version
        assert (entry["values"] is None) == (not s.answerable)


def test_a_changed_oracle_aborts_the_build_naming_the_scenario(
    world: OlistWorld,
    files: DatasetFiles,
    scenarios: list[Scenario],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = ORACLES["l2_delivery_report_2018_03"](files.parquet_dir)

    def off_by_a_day(pq: Path) -> dict[str, Any]:
        return {**real, "mean_delivery_days": real["mean_delivery_days"] + 1}

    monkeypatch.setitem(ORACLES, "l2_delivery_report_2018_03", off_by_a_day)
    with pytest.raises(ReferenceMismatchError) as exc:
        build_references(scenarios, world, files)
    message = str(exc.value)
    assert "'l2-delivery-report-2018-03'" in message
    assert "'mean_delivery_days'" in message
    assert str(round(real["mean_delivery_days"] + 1, 6))[:8] in message


def test_a_reordered_ordered_table_is_a_mismatch(
    world: OlistWorld,
    files: DatasetFiles,
    scenarios: list[Scenario],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = "l2_delivered_orders_by_month_2017"
    real = ORACLES[name](files.parquet_dir)
    scenario = _by_id(scenarios, "l2-delivered-orders-by-month-2017")
    build_references([scenario], world, files)  # the real oracle passes
    reversed_rows = {"delivered_orders_by_month": real["delivered_orders_by_month"][::-1]}
    monkeypatch.setitem(ORACLES, name, lambda pq: reversed_rows)
    with pytest.raises(ReferenceMismatchError, match="l2-delivered-orders-by-month-2017"):
        build_references([scenario], world, files)


def test_missing_or_malformed_oracles_abort(
    world: OlistWorld,
    files: DatasetFiles,
    scenarios: list[Scenario],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scenario = _by_id(scenarios, "l1-delivered-orders")
    monkeypatch.delitem(ORACLES, "l1_delivered_orders")
    with pytest.raises(ReferenceMismatchError, match="no oracle 'l1_delivered_orders'"):
        build_references([scenario], world, files)
    monkeypatch.setitem(ORACLES, "l1_delivered_orders", lambda pq: {"delivered": 1})
    with pytest.raises(ReferenceMismatchError, match=r"returned metrics \['delivered'\]"):
        build_references([scenario], world, files)


def test_check_sql_shape_and_read_only(
    world: OlistWorld, files: DatasetFiles, scenarios: list[Scenario]
) -> None:
    scenario = _by_id(scenarios, "l1-delivered-orders")
    renamed = scenario.model_copy(
        update={"check_sql": "SELECT COUNT(*) AS n FROM orders WHERE order_status = 'delivered'"}
    )
    with pytest.raises(ReferenceMismatchError, match=r"exactly the columns \['delivered_orders'\]"):
        build_references([renamed], world, files)
    writing = scenario.model_copy(
        update={"check_sql": "DELETE FROM orders RETURNING 1 AS delivered_orders"}
    )
    with pytest.raises(ReferenceMismatchError, match="readonly"):
        build_references([writing], world, files)
    assert build_references([scenario], world, files)["references"]["l1-delivered-orders"]


def test_reference_for_checks_data_hash_and_version(
    world: OlistWorld, files: DatasetFiles, scenarios: list[Scenario], tmp_path: Path
) -> None:
    good_hash = world.data_hash(files)
    delivered = _by_id(scenarios, "l1-delivered-orders")
    values = reference_for(delivered, good_hash)
    assert set(values) == {"delivered_orders"}
    assert isinstance(values["delivered_orders"], int)
    assert reference_for(_by_id(scenarios, "l3-net-profit-2018"), good_hash) == {}
    with pytest.raises(StaleReferencesError, match="references benchmark"):
        reference_for(delivered, "0" * 64)
    with pytest.raises(StaleReferencesError, match="version 1, the scenario is version 2"):
        reference_for(delivered.model_copy(update={"version": 2}), good_hash)
    doc = json.loads(references_path("olist").read_text())
    del doc["references"]["l1-delivered-orders"]
    (tmp_path / "olist.json").write_text(json.dumps(doc))
    with pytest.raises(StaleReferencesError, match="no reference for 'l1-delivered-orders'"):
        reference_for(delivered, good_hash, root=tmp_path)
    with pytest.raises(StaleReferencesError, match="no references file"):
        load_references(tmp_path / "missing.json")


def test_build_all_writes_then_checks(
    files: DatasetFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BACKINTEL_OLIST_ORDERS", raising=False)
    data_root = files.parquet_dir.parent.parent.parent  # reuse the fixture's build
    definitions = tmp_path / "definitions"  # only the base Olist world's scenarios
    for path in DEFINITIONS_DIR.rglob("*.scenario.yaml"):
        if "world: olist}" in path.read_text():
            target = definitions / path.relative_to(DEFINITIONS_DIR)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(path.read_text())
    out = tmp_path / "refs"
    kw = {"out_dir": out, "data_root": data_root, "definitions": definitions}
    with pytest.raises(ReferencesOutOfDateError, match="differs from a fresh build"):
        build_all(write=False, **kw)
    built = build_all(write=True, **kw)
    assert (out / "olist.json").read_text() == (REFERENCES_DIR / "olist.json").read_text()
    assert set(built) == {"olist.json"}
    seed = out / "olist.moves.json"  # the moving-probe search results, beside the references
    assert seed.read_text() == (REFERENCES_DIR / "olist.moves.json").read_text()
    build_all(write=False, **kw)
    doc = json.loads(seed.read_text())
    gone = doc["entries"].pop(min(doc["entries"]))["scenario"]
    seed.write_text(json.dumps(doc))
    with pytest.raises(ReferencesOutOfDateError, match=rf"moves.json is out of date for {gone}"):
        build_all(write=False, **kw)
    seed.unlink()
    with pytest.raises(ReferencesOutOfDateError, match=r"moves.json is missing.*references bench"):
        build_all(write=False, **kw)
    build_all(write=True, **kw)
    (out / "olist.json").write_text(
        re.sub(r'"data_hash": "\w+"', '"data_hash": "x"', (out / "olist.json").read_text())
    )
    with pytest.raises(ReferencesOutOfDateError):
        build_all(write=False, **kw)
