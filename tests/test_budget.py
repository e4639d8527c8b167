"""Cost per trial from the dated price table, the per-trial cost limit, and run budgets that
end the remaining trials as `budget_exceeded` without calling the analyst."""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helpers
import pytest
from helpers import orders_store
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from analyst.agent import ModelAnalyst
from pytest_backintel.analyst_api import AnalystLimits, AnalystTask, BudgetExceeded, Usage
from pytest_backintel.collect.loading import DEFINITIONS_DIR
from pytest_backintel.options import RunLimits, positive_usd
from pytest_backintel.records.prices import load_prices
from pytest_backintel.run.budget import RunBudget, trial_cost_usd
from stores.base import ProvisionedStore

PRICED = "openai:gpt-4o"
FEW = [*helpers.FEW, DEFINITIONS_DIR / "level3" / "l3-best-seller-ambiguous.scenario.yaml"]
NOT_CALLED = "the analyst was not called"


# -- cost ---------------------------------------------------------------------------------------


@given(st.integers(0, 10**7), st.integers(0, 10**7))
def test_a_priced_model_costs_its_tokens_at_the_table_price(
    tokens_in: int, tokens_out: int
) -> None:
    price = load_prices().price_for(PRICED)
    assert price is not None
    cost = trial_cost_usd("model", PRICED, Usage(1, tokens_in, tokens_out, 0))
    assert cost == pytest.approx((tokens_in * price.input + tokens_out * price.output) / 1e6)


@pytest.mark.parametrize(
    ("kind", "model", "usage"),
    [
        ("model", "openai:no-such-model", Usage(1, 10, 10, 0)),
        ("model", None, Usage(1, 10, 10, 0)),
        ("calibration", PRICED, Usage(1, 10, 10, 0)),
        ("replay", PRICED, Usage(1, 10, 10, 0)),
        ("model", PRICED, None),
    ],
)
def test_an_unknown_cost_is_none_never_zero(
    kind: Any, model: str | None, usage: Usage | None
) -> None:
    assert trial_cost_usd(kind, model, usage) is None


@pytest.mark.parametrize("bad", ["0", "-1", "abc", "inf", "nan"])
def test_a_cost_option_must_be_a_positive_amount(bad: str) -> None:
    with pytest.raises(pytest.UsageError, match="positive amount of USD"):
        positive_usd(bad)
    assert positive_usd("0.25") == 0.25


# -- per-trial cost limit through Pydantic AI's cost_limit ---------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ProvisionedStore]:
    backend, provisioned = orders_store(tmp_path, rows=1)
    yield provisioned
    backend.teardown_session()


def looping(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart("list_tables", {})])


def task(store: ProvisionedStore, **limits: Any) -> AnalystTask:
    return AnalystTask("How many?", store.connect, store.display_id, AnalystLimits(**limits))


def test_max_cost_stops_a_priced_model_and_keeps_what_it_did(store: ProvisionedStore) -> None:
    analyst = ModelAnalyst(FunctionModel(looping), name=PRICED)
    with pytest.raises(BudgetExceeded, match="cost_limit") as caught:
        analyst.answer(task(store, max_cost_usd=0.001, max_requests=1000, max_tool_calls=1000))
    run = caught.value.run
    assert run is not None
    assert run.usage.requests >= 2
    assert run.messages, "the partial message history is kept for the record and the cassette"
    spent = trial_cost_usd("model", PRICED, run.usage)
    assert spent is not None
    assert spent > 0.001


def test_the_same_limit_is_not_hit_by_a_short_run(store: ProvisionedStore) -> None:
    analyst = ModelAnalyst(FunctionModel(looping), name=PRICED)
    with pytest.raises(BudgetExceeded, match="request_limit"):  # stopped by requests, not cost
        analyst.answer(task(store, max_cost_usd=10.0, max_requests=3))


# -- run budgets ----------------------------------------------------------------------------------


def test_a_run_budget_blocks_only_once_spent(tmp_path: Path) -> None:
    budget = RunBudget(tmp_path, RunLimits(max_requests=10))
    budget.reset()
    budget.charge(Usage(requests=9), None)
    assert budget.blocked() is None
    assert budget.cap(AnalystLimits(max_requests=30)).max_requests == 1
    budget.charge(Usage(requests=1), None)
    why = budget.blocked()
    assert why is not None
    assert "--run-max-requests 10" in why
    assert NOT_CALLED in why


def test_without_run_budgets_nothing_is_written_or_capped(tmp_path: Path) -> None:
    budget = RunBudget(tmp_path, RunLimits())
    budget.reset()
    budget.charge(Usage(requests=10**6), 5.0)
    limits = AnalystLimits()
    assert budget.blocked() is None
    assert budget.cap(limits) == limits
    assert not (tmp_path / "budget.json").exists()


def test_the_cost_budget_counts_priced_trials_and_the_unpriced_ones_apart(tmp_path: Path) -> None:
    budget = RunBudget(tmp_path, RunLimits(max_cost_usd=1.0))
    budget.charge(Usage(requests=1, input_tokens=5), None)
    budget.charge(Usage(requests=1), 0.6)
    assert budget.blocked() is None
    assert budget.cap(AnalystLimits(max_cost_usd=2.0)).max_cost_usd == pytest.approx(0.4)
    budget.charge(Usage(requests=1), 0.5)
    assert budget.totals()["unpriced_trials"] == 1
    assert budget.blocked() is not None


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 5000)), max_size=12), st.integers(1, 300)
)
def test_the_ledger_sums_every_charge_and_blocks_exactly_when_spent(
    tmp_path_factory: pytest.TempPathFactory, charges: list[tuple[int, int]], limit: int
) -> None:
    folder = tmp_path_factory.mktemp("ledger")
    workers = [RunBudget(folder, RunLimits(max_requests=limit)) for _ in range(2)]
    for i, (requests, tokens) in enumerate(charges):
        workers[i % 2].charge(Usage(requests=requests, input_tokens=tokens), None)
    total = sum(r for r, _ in charges)
    assert workers[0].totals()["requests"] == total
    assert workers[1].totals()["tokens"] == sum(t for _, t in charges)
    assert (workers[1].blocked() is not None) == (total >= limit)


def _charge_many(folder: str) -> None:
    budget = RunBudget(Path(folder), RunLimits(max_requests=10**9))
    for _ in range(50):
        budget.charge(Usage(requests=1, input_tokens=2), None)


def test_concurrent_processes_lose_no_charge(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_charge_many, args=(str(tmp_path),)) for _ in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    totals = RunBudget(tmp_path, RunLimits(max_requests=1)).totals()
    assert (totals["requests"], totals["tokens"], totals["trials"]) == (100, 200, 100)


# -- through pytest ----------------------------------------------------------------------------


def run_bench(pytester: pytest.Pytester, *args: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    results = pytester.path / "results"
    pytester.runpytest_subprocess(
        *map(str, FEW), "--results-dir", str(results), "--run-id", "b", "-p", "no:randomly", *args
    )
    run_dir = results / "b"
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    return records, json.loads((run_dir / "run.json").read_text())


def test_a_spent_run_budget_ends_the_remaining_trials_unasked(pytester: pytest.Pytester) -> None:
    # one trial at a time (a calibration analyst's `auto` is two on two cores), so which trial
    # the budget stops is known
    records, run = run_bench(pytester, "--run-max-requests", "6", "--concurrency", "1")
    outcomes = [r["outcome"] for r in records]
    assert outcomes[0] == "pass"  # 5 requests; the next trial may use only 1
    assert outcomes[1:] == ["budget_exceeded"] * 3
    assert records[1]["usage"]["requests"] == 1, "the capped trial's usage is recorded"
    assert all(NOT_CALLED in r["reasons"][0]["message"] for r in records[2:])
    assert all(r["usage"] is None and r["messages"] == [] for r in records[2:])
    assert run["run_limits"]["max_requests"] == 6
    assert run["budget_spent"]["requests"] == 6
    assert all(r["cost_usd"] is None for r in records), "calibration analysts are not billed"


def test_xdist_workers_share_the_run_budget(pytester: pytest.Pytester) -> None:
    records, run = run_bench(pytester, "--run-max-requests", "1", "-n", "2")
    assert {r["outcome"] for r in records} == {"budget_exceeded"}
    assert run["budget_spent"]["requests"] <= 2, "at most one capped trial per worker"
    assert sum(NOT_CALLED in r["reasons"][0]["message"] for r in records) >= 2


PRICED_ANALYST = f'''
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import FunctionModel
from analyst.agent import ModelAnalyst

def loop(messages, info):
    return ModelResponse(parts=[ToolCallPart("list_tables", {{}})])

def factory(config):
    return ModelAnalyst(FunctionModel(loop), name="{PRICED}")
'''


def test_max_cost_ends_a_priced_trial_and_its_cost_is_recorded(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(priced_analyst=PRICED_ANALYST)
    records, run = run_bench(
        pytester, "--analyst", "priced_analyst:factory", "--model", PRICED, "--max-cost", "0.002"
    )
    assert {r["outcome"] for r in records} == {"budget_exceeded"}
    assert all("cost_limit" in r["reasons"][0]["message"] for r in records)
    for record in records:
        usage = record["usage"]
        assert record["cost_usd"] == pytest.approx(trial_cost_usd("model", PRICED, Usage(**usage)))
        assert record["cost_usd"] > 0.002
    assert run["limits"]["max_cost_usd"] == 0.002
