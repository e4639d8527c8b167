"""A suite file's `models` make a model matrix of every run of its folder: a user's own agent,
given each model by its factory, measured once per model in one session."""

from __future__ import annotations

import json

import pytest
from helpers import shop_suite

AGENT = """
from pytest_backintel.analyst_api import AnalystConfig, AnalystRun, AnalystTask
from pytest_backintel.contract import AnalystAnswer, Evidence, MetricValue, Refusal

SQL = "SELECT COUNT(*) AS delivered_orders FROM orders WHERE status = 'delivered'"


class Agent:
    kind = "custom"

    def __init__(self, model):
        self.name = f"counter on {model}"
        self.model = model

    def answer(self, task: AnalystTask) -> AnalystRun:
        if self.model == "mine:weak":
            return AnalystRun(Refusal(missing=["a rule"], explanation="I cannot count."))
        with task.connect() as store:
            value = store.run_sql(SQL).rows[0][0]
        return AnalystRun(AnalystAnswer(
            metrics=[MetricValue(name="delivered_orders", value=value, unit="rows")],
            evidence=[Evidence(id="e1", kind="sql", code=SQL, metrics=["delivered_orders"])],
            method="counted",
        ))


def per_model(config: AnalystConfig) -> Agent:
    return Agent(config.model)
"""

SUITE = """
name: shop
datasets:
  shop: {sqlite: ../shop.sqlite}
dataset: shop
split: development
level: 1
models: [mine:strong, mine:weak]
"""

SCENARIO = """
id: delivered-orders
version: 1
title: delivered
question: How many orders were delivered?
family: counts
answerable: true
metrics:
  - {name: delivered_orders, kind: count, unit: rows}
reference:
  sql: SELECT COUNT(*) AS delivered_orders FROM orders WHERE status = 'delivered'
"""


@pytest.fixture
def repo(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(agent=AGENT)
    shop_suite(pytester, "suite", SUITE, SCENARIO)
    return pytester


def test_a_suite_files_models_run_as_a_matrix(repo: pytest.Pytester) -> None:
    result = repo.runpytest_subprocess(
        "suite", "-p", "no:xdist", "--analyst", "agent:per_model", "--trials", "2", "--run-id", "m"
    )
    assert result.ret == 1, result.stdout.str()  # the weak model's trials fail
    result.assert_outcomes(passed=2, failed=2)
    matrix = json.loads((repo.path / "results" / "m" / "matrix.json").read_text())
    board = {row["model"]: row for row in matrix["leaderboard"]}
    assert board["mine:strong"]["pass_rate"]["estimate"] == 1.0
    assert board["mine:weak"]["pass_rate"]["estimate"] == 0.0
    strong = (repo.path / "results" / "m" / "mine-strong" / "records.jsonl").read_text()
    assert [json.loads(line)["outcome"] for line in strong.splitlines()] == ["pass", "pass"]
    assert "#1 mine:strong: pass 100.0%" in result.stdout.str()


def test_the_command_line_chooses_over_the_suite_file(repo: pytest.Pytester) -> None:
    result = repo.runpytest_subprocess(
        "suite", "-p", "no:xdist", "--analyst", "agent:per_model", "--model", "mine:strong"
    )
    result.assert_outcomes(passed=1)
    assert not list((repo.path / "results").glob("*/matrix.json"))


def test_a_suite_files_models_are_checked(repo: pytest.Pytester) -> None:
    suite = repo.path / "suite" / "backintel-suite.yaml"
    suite.write_text(SUITE.replace("[mine:strong, mine:weak]", "[mine:strong, mine:strong]"))
    result = repo.runpytest_subprocess("suite", "-p", "no:xdist", "--analyst", "agent:per_model")
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error: nothing runs
    assert f"{suite}:8: models: a list of distinct model strings" in result.stdout.str()
    assert not list((repo.path / "results").glob("*/records.jsonl"))


def test_a_calibration_run_of_the_suite_leaves_its_models_aside(repo: pytest.Pytester) -> None:
    result = repo.runpytest_subprocess("suite", "-p", "no:xdist", "--analyst", "reference")
    result.assert_outcomes(passed=1)
    assert not list((repo.path / "results").glob("*/matrix.json"))
