"""Totals a hostile answer cannot get around (issue 28): an evidence budget per answer, and a
value a store cannot convert coming back to the analyst as a tool result, not a crash. Every
backend they apply to runs here; none is skipped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pytest_backintel.analyst_api import AnalystLimits, AnalystRun, AnalystTask
from pytest_backintel.contract import AnalystAnswer
from pytest_backintel.outcomes import Outcome
from pytest_backintel.scenario import Scenario
from pytest_backintel.trial import TrialResult, run_trial
from stores.base import DatasetFiles, ProvisionedStore, Store
from stores.registry import load_store_class

BACKENDS = ["sqlite", "duckdb", "postgres"]
STATEMENT_S = 1.0
SCENARIO = Scenario.model_validate(
    {"id": "hostile-budget", "version": 1, "title": "hostile", "question": "How many orders?",
     "dataset": {"world": "olist"}, "split": "development", "level": 1, "family": "hostile",
     "answerable": True, "check_sql": "SELECT count(*) AS n FROM orders",
     "metrics": [{"name": "n", "kind": "count", "unit": "rows"}]}
)  # fmt: skip
ENDLESS = (
    "WITH RECURSIVE r(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM r) "
    "SELECT count(*) AS n FROM r, orders"
)
HONEST = "SELECT count(*) AS n FROM orders"


class Fixed:
    """A custom analyst that gives the same answer every time."""

    name = "fixed"
    kind = "custom"

    def __init__(self, answer: AnalystAnswer) -> None:
        self.output = answer

    def answer(self, task: AnalystTask) -> AnalystRun:
        return AnalystRun(self.output)


def answer_with(codes: list[str]) -> AnalystAnswer:
    return AnalystAnswer.model_validate(
        {"metrics": [{"name": "n", "value": 3, "unit": "rows"}],
         "evidence": [{"id": f"e{i}", "kind": "sql", "code": c, "metrics": ["n"]}
                      for i, c in enumerate(codes)]}
    )  # fmt: skip


@pytest.fixture(scope="module", params=BACKENDS)
def item(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProvisionedStore]:
    root = tmp_path_factory.mktemp(f"limits-{request.param}")
    (root / "parquet").mkdir()
    pq.write_table(
        pa.table({"id": pa.array([1, 2, 3], pa.int64())}), root / "parquet/orders.parquet"
    )
    store: Store = load_store_class(request.param)(root / "work", statement_timeout_s=STATEMENT_S)
    store.setup_session()
    provisioned = store.provision(DatasetFiles("hostile", root / "parquet"))
    yield provisioned
    provisioned.teardown()
    store.teardown_session()


def trial(item: ProvisionedStore, answer: AnalystAnswer, **limits: Any) -> TrialResult:
    return run_trial(
        SCENARIO,
        1,
        item,
        Fixed(answer),
        AnalystLimits(wall_time_s=60, **limits),
        lambda _: {"n": 3},
    )


def test_fifty_endless_evidence_items_end_within_the_evidence_budget(
    item: ProvisionedStore,
) -> None:
    result = trial(item, answer_with([ENDLESS] * 50), evidence_time_s=4.0)
    record = result.to_record()
    budget = record["evidence_budget"]
    assert record["outcome"] == Outcome.UNSUPPORTED_EVIDENCE.value
    assert (budget["max_items"], budget["time_s"], budget["items_cited"]) == (20, 4.0, 50)
    assert budget["stopped_by"] == "time_s"
    # No run starts after the budget: at most one statement limit past it.
    assert budget["spent_s"] < 4.0 + STATEMENT_S + 1.5, budget
    assert 1 <= budget["items_run"] < 20
    errors = [e["error"] for e in record["evidence"]]
    assert all(errors), "every endless item is unsupported"
    assert all("evidence budget of 4 s per answer" in e for e in errors[budget["items_run"] : 20])
    assert all("at most 20 are re-executed per answer" in e for e in errors[20:])
    messages = [r["message"] for r in record["reasons"]]
    assert any("evidence budget of 4 s" in m for m in messages)
    assert any("cites 50 evidence items and at most 20" in m for m in messages)


def test_evidence_items_beyond_the_cap_are_unsupported_naming_it(item: ProvisionedStore) -> None:
    within = trial(item, answer_with([HONEST] * 3), evidence_max_items=3)
    beyond = trial(item, answer_with([HONEST] * 4), evidence_max_items=3)
    assert within.score.outcome is Outcome.PASS, within.score.reasons  # control
    assert beyond.score.outcome is Outcome.UNSUPPORTED_EVIDENCE
    assert [e.ran for e in beyond.evidence] == [True, True, True, False]
    assert beyond.evidence[3].error == (
        "not run: the answer cites 4 evidence items and at most 3 are re-executed per answer "
        "(--evidence-max-items)"
    )
    assert beyond.to_record()["evidence_budget"]["stopped_by"] == "max_items"
