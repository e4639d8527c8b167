"""Under the built-in calibration analyst, which cannot be a bad one, a run's worlds start
building before the analyst loads (its load imports Pydantic AI: seconds of one core on a
fresh install, while the other core would have nothing to do). Any other analyst is still
loaded first, so a bad one is a usage error before anything is built."""

from __future__ import annotations

import pytest

from pytest_backintel.collect.loading import DEFINITIONS_DIR

SCENARIO = DEFINITIONS_DIR / "level1" / "l1-delivered-orders.scenario.yaml"

RECORDER = """
import os

from pytest_backintel.run import session_data
from pytest_backintel.run.world_builds import WorldBuilds


def _recording(name, call):
    def recorded(*args, **kwargs):
        with open(os.environ["EVENTS"], "a") as out:
            out.write(name + "\\n")
        return call(*args, **kwargs)

    return recorded


WorldBuilds.prefetch = _recording("prefetch", WorldBuilds.prefetch)
session_data.load_analyst = _recording("load", session_data.load_analyst)
"""

CUSTOM = """
from pytest_backintel.analyst_api import AnalystRun
from pytest_backintel.contract import Refusal


class _Refuser:
    name = "refuser"
    kind = "custom"

    def answer(self, task):
        return AnalystRun(output=Refusal(missing=["nothing"], explanation="a test"))


def refuser(config):
    return _Refuser()
"""


@pytest.mark.parametrize(
    ("analyst", "order", "outcome"),
    [
        ([], ["prefetch", "load"], {"passed": 1}),
        (["--analyst", "custom_refuser:refuser"], ["load", "prefetch"], {"failed": 1}),
    ],
    ids=["calibration", "custom"],
)
def test_worlds_start_building_before_only_the_calibration_analyst_loads(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    analyst: list[str],
    order: list[str],
    outcome: dict[str, int],
) -> None:
    pytester.makepyfile(recorder=RECORDER, custom_refuser=CUSTOM)
    events = pytester.path / "events.txt"
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    monkeypatch.setenv("BACKINTEL_DATA_DIR", str(pytester.path / "data"))
    monkeypatch.setenv("EVENTS", str(events))
    result = pytester.runpytest_subprocess(
        "-p", "recorder", str(SCENARIO), *analyst,
        "--results-dir", str(pytester.path / "results"),
        "-p", "no:cacheprovider", "-p", "no:xdist",
    )  # fmt: skip
    result.assert_outcomes(**outcome)
    assert events.read_text().split()[:2] == order
