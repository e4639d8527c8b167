"""Totals a hostile answer cannot get around (issue 28): an evidence budget per answer, and a
value a store cannot convert coming back to the analyst as a tool result, not a crash. Every
backend they apply to runs here; none is skipped."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import orders_store
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from analyst.agent import OUTPUT_TOOL_NAMES, ModelAnalyst
from pytest_backintel.analyst_api import AnalystLimits, AnalystRun, AnalystTask
from pytest_backintel.contract import AnalystAnswer
from pytest_backintel.outcomes import Outcome
from pytest_backintel.run.trial import TrialResult, run_trial
from pytest_backintel.scenario import Scenario
from stores.base import (
    MAX_RESULT_BYTES,
    MAX_ROWS,
    DatasetFiles,
    Fingerprint,
    ProvisionedStore,
    QueryResult,
    Store,
    StoreSession,
    TableInfo,
)
from stores.registry import load_store_class

BACKENDS = ["sqlite", "duckdb", "lake-parquet", "postgres"]
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


def three_orders(backend: str, root: Path) -> Iterator[ProvisionedStore]:
    """A table `orders` of three rows provisioned on `backend` (statements limited to
    `STATEMENT_S`), torn down after."""
    (root / "parquet").mkdir()
    pq.write_table(
        pa.table({"id": pa.array([1, 2, 3], pa.int64())}), root / "parquet/orders.parquet"
    )
    store: Store = load_store_class(backend)(root / "work", statement_timeout_s=STATEMENT_S)
    store.setup_session()
    provisioned = store.provision(DatasetFiles("hostile", root / "parquet"))
    yield provisioned
    provisioned.teardown()
    store.teardown_session()


@pytest.fixture(scope="module", params=BACKENDS)
def item(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProvisionedStore]:
    yield from three_orders(request.param, tmp_path_factory.mktemp(f"limits-{request.param}"))


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


UNCONVERTIBLE: dict[str, list[str]] = {
    "postgres": [
        "SELECT 'infinity'::timestamp AS t",
        "SELECT '-infinity'::timestamptz AS t",
        "SELECT 'infinity'::date AS d, '-infinity'::date AS e",
        "SELECT '20000-01-01 12:34:56'::timestamp AS far, '20000-01-01'::date AS day",
        "SELECT 'NaN'::numeric AS n, 'Infinity'::float8 AS f, 1e500::numeric AS huge",
    ],
    "duckdb": [
        "SELECT 'infinity'::timestamp AS t, '-infinity'::timestamp AS u",
        "SELECT '-infinity'::date AS d, 'infinity'::timestamptz AS z, DATE '9999-12-31' AS real",
        "SELECT 'infinity'::timestamp_ns AS n, 'infinity'::date AS d, NULL::date AS none",
        "SELECT '20000-01-01'::timestamp AS far",
        "SELECT 'nan'::double AS n, 'inf'::double AS f, " + "9" * 38 + "::decimal(38,0) AS h",
    ],
    "sqlite": ["SELECT 9e999 AS f, -9e999 AS g", "SELECT 0.0 / 0 AS n, 10000000000000000000 AS h"],
}
UNCONVERTIBLE["lake-parquet"] = UNCONVERTIBLE["duckdb"]  # DuckDB's engine over Parquet views
EXPECTED: dict[str, list[str]] = {
    "postgres": ["infinity", "-infinity", "infinity\t-infinity",
                 "20000-01-01 12:34:56\t20000-01-01", "NaN\tinf\t1" + "0" * 500],
    # DuckDB's Python client gives its infinities as datetime.max and date.min: named instead
    "duckdb": ["infinity\t-infinity", "-infinity\tinfinity\t9999-12-31", "infinity\tinfinity\tNULL",
               "20000-01-01", "nan\tinf\t" + "9" * 38],
    "sqlite": ["inf\t-inf", "NULL\t1e+19"],
}  # fmt: skip
EXPECTED["lake-parquet"] = EXPECTED["duckdb"]


def scripted(statements: list[str], seen: list[str]) -> FunctionModel:
    """A model that runs each statement through `run_sql`, records what came back, answers."""
    queue = [ToolCallPart("run_sql", {"sql": s}) for s in statements]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest):
            seen.extend(str(p.content) for p in last.parts if p.part_kind == "tool-return")
        if queue:
            return ModelResponse(parts=[queue.pop(0)])
        answer = answer_with([HONEST]).model_dump(mode="json")
        return ModelResponse(parts=[ToolCallPart(OUTPUT_TOOL_NAMES[0], answer)])

    return FunctionModel(respond)


def test_values_a_store_cannot_convert_come_back_to_the_analyst(
    item: ProvisionedStore, request: pytest.FixtureRequest
) -> None:
    backend = item.backend
    seen: list[str] = []
    analyst = ModelAnalyst(scripted(UNCONVERTIBLE[backend], seen), name="hostile")
    result = run_trial(
        SCENARIO, 1, item, analyst, AnalystLimits(wall_time_s=60), lambda _: {"n": 3}
    )
    assert result.score.outcome is Outcome.PASS, result.score.reasons
    assert len(seen) == len(UNCONVERTIBLE[backend])
    for text, expected in zip(seen, EXPECTED[backend], strict=True):
        assert expected in text, (expected, text)
        assert not text.startswith("ERROR"), text


class BuggySession(StoreSession):
    """A real session whose result conversion fails the way stores/postgres/store.py's did on
    `'infinity'::timestamp` before it named such values: an exception out of harness code."""

    def __init__(self, inner: StoreSession) -> None:
        self.inner = inner

    def list_tables(self) -> list[str]:
        return self.inner.list_tables()

    def describe_table(self, name: str) -> TableInfo:
        return self.inner.describe_table(name)

    def run_sql(
        self, sql: str, max_rows: int = MAX_ROWS, max_bytes: int = MAX_RESULT_BYTES
    ) -> QueryResult:
        if "infinity" in sql:
            date(2000, 1, 1) + timedelta(days=10**9)  # OverflowError, as the old conversion
        return self.inner.run_sql(sql, max_rows, max_bytes)

    def close(self) -> None:
        self.inner.close()


class BuggyItem(ProvisionedStore):
    def __init__(self, inner: ProvisionedStore) -> None:
        self.inner = inner
        self.backend = inner.backend
        self.store_id = inner.store_id

    def connect(self) -> StoreSession:
        return BuggySession(self.inner.connect())

    def fingerprint(self) -> Fingerprint:
        return self.inner.fingerprint()

    def teardown(self) -> None:
        self.inner.teardown()


def test_an_exception_out_of_harness_code_is_infra_error_with_its_traceback(
    tmp_path: Path,
) -> None:
    backend, item = orders_store(tmp_path, 3)  # the handling is the harness's, on any store
    analyst = ModelAnalyst(scripted(["SELECT 'infinity' AS t"], []), name="hostile")
    result = run_trial(SCENARIO, 1, BuggyItem(item), analyst, AnalystLimits(), lambda _: {"n": 3})
    (reason,) = result.score.reasons
    assert result.score.outcome is Outcome.INFRA_ERROR, result.score.reasons
    assert "the harness failed in a store tool (OverflowError" in reason.message
    assert "Traceback (most recent call last)" in reason.message
    assert "timedelta(days=10**9)" in reason.message
    # control: the same trial without the fault passes
    clean = ModelAnalyst(scripted(["SELECT 'infinity' AS t"], []), name="hostile")
    assert run_trial(
        SCENARIO, 1, item, clean, AnalystLimits(), lambda _: {"n": 3}
    ).score.outcome is (Outcome.PASS)
    backend.teardown_session()
