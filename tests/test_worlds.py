"""Worlds through the `backintel.worlds` entry points: the harness's only way to reach them."""

from pathlib import Path

import pytest

from pytest_backintel.cli.commands import main
from pytest_backintel.collect.loading import DEFINITIONS_DIR, find_scenarios
from pytest_backintel.collect.worlds import World, available_worlds, data_dir, get_world

SHIPPED = {
    "acceptance-v1",
    "olist",
    "olist-real",
    "olist-replay",
    "olist-split",
    "olist_catalog",
    "olist_orders",
    "tpch",
}

SCENARIO = """\
id: my-count
version: 1
title: A count
question: How many orders are there? Report metric `n_orders`.
dataset:
  world: {world}
split: development
level: 1
family: counts_filters
answerable: true
metrics:
  - {{name: n_orders, kind: count, unit: orders}}
check_sql: SELECT COUNT(*) AS n_orders FROM orders
"""


def test_the_shipped_worlds_are_registered_as_entry_points() -> None:
    assert set(available_worlds()) >= SHIPPED
    world = get_world("olist")
    assert isinstance(world, World)
    assert world.name == "olist"


def test_every_shipped_scenario_names_a_registered_world() -> None:
    worlds = {s.dataset.world for _, s in find_scenarios(DEFINITIONS_DIR).values()}
    assert worlds <= set(available_worlds())


def test_an_unknown_world_names_the_closest_registered_ones() -> None:
    with pytest.raises(LookupError, match=r"unknown world 'olsit'\. Did you mean 'olist'"):
        get_world("olsit")


def test_the_data_dir_is_under_the_rootdir_unless_the_environment_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BACKINTEL_DATA_DIR", raising=False)
    assert data_dir(tmp_path) == tmp_path / "data"
    monkeypatch.setenv("BACKINTEL_DATA_DIR", str(tmp_path / "elsewhere"))
    assert data_dir(tmp_path) == (tmp_path / "elsewhere").resolve()


def test_the_world_reference_is_the_committed_one() -> None:
    _, scenario = find_scenarios(DEFINITIONS_DIR)["l1-delivered-orders"]
    world = get_world(scenario.dataset.world)
    files = world.ensure_built(data_dir(DEFINITIONS_DIR.parents[1]), scenario.dataset.snapshot)
    reference = world.reference(scenario, files, world.data_hash(files))
    assert isinstance(reference["delivered_orders"], int)
    assert reference["delivered_orders"] > 0


def test_validate_reports_an_unknown_world_at_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.scenario.yaml"
    good.write_text(SCENARIO.format(world="olist"))
    bad = tmp_path / "bad.scenario.yaml"
    bad.write_text(SCENARIO.format(world="olsit").replace("id: my-count", "id: my-other"))
    assert main(["validate", str(good)]) == 0
    assert main(["validate", str(good), str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:6: dataset.world: unknown world 'olsit'. Did you mean 'olist'" in err
    assert str(good) not in err


def test_collection_fails_on_an_unknown_world_before_any_item_runs(
    pytester: pytest.Pytester,
) -> None:
    pytester.makefile(".scenario.yaml", bad=SCENARIO.format(world="olsit"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--results-dir", "results")
    result.stdout.fnmatch_lines(["*bad.scenario.yaml:6: dataset.world: unknown world 'olsit'*"])
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(errors=1)
