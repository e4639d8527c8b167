"""Offline traces: every agent run, model request and tool call of a trial lands in
`traces.jsonl` under the trial's trace id, and nothing is installed globally."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import FEW, orders_store, script
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from pydantic_ai import Agent
from pydantic_ai.models.function import FunctionModel

from analyst.agent import ModelAnalyst
from pytest_backintel.analyst_api import AnalystLimits, AnalystTask
from pytest_backintel.records.tracing import Tracing, merge_traces
from stores.base import ProvisionedStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ProvisionedStore]:
    backend, provisioned = orders_store(tmp_path, rows=2)
    yield provisioned
    backend.teardown_session()


def task(store: ProvisionedStore) -> AnalystTask:
    return AnalystTask("How many orders?", store.connect, store.display_id, AnalystLimits())


def read_spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def traced_run(tmp_path: Path, store: ProvisionedStore, in_loop: bool = False) -> tuple[str, Path]:
    tracing = Tracing(tmp_path / "run", "main")
    analyst = ModelAnalyst(FunctionModel(script))
    with tracing.trial("node::id", "case/t1") as span:
        if in_loop:  # the analyst then runs its loop in a worker thread

            async def inside() -> None:
                analyst.answer(task(store))

            asyncio.run(inside())
        else:
            analyst.answer(task(store))
        span.finish("pass")
    tracing.close()
    assert span.trace_id is not None
    return span.trace_id, tracing.exporter.path


@pytest.mark.parametrize("in_loop", [False, True], ids=["sync", "inside-a-running-loop"])
def test_a_trial_span_parents_the_agent_run_its_requests_and_tools(
    tmp_path: Path, store: ProvisionedStore, in_loop: bool
) -> None:
    trace_id, path = traced_run(tmp_path, store, in_loop)
    spans = read_spans(path)
    assert {s["trace_id"] for s in spans} == {trace_id}
    by_id = {s["span_id"]: s for s in spans}
    roots = [s for s in spans if s["parent"] is None]
    assert [r["name"] for r in roots] == ["backintel trial case/t1"]
    assert roots[0]["attributes"]["backintel.outcome"] == "pass"
    assert all(s["parent"] in by_id for s in spans if s["parent"] is not None)
    names = [s["name"] for s in spans]
    assert names.count("invoke_agent backintel-analyst") == 1
    assert sum(n.startswith("chat ") for n in names) == 3, "one span per model request"
    assert {n for n in names if n.startswith("execute_tool")} >= {
        "execute_tool list_tables",
        "execute_tool run_sql",
    }
    for s in spans:
        assert len(s["trace_id"]) == 32
        assert len(s["span_id"]) == 16
        assert s["start"] <= s["end"]
        assert s["duration_s"] >= 0


def test_tracing_sets_no_global_provider_and_restores_instrumentation(
    tmp_path: Path, store: ProvisionedStore
) -> None:
    before = Agent._instrument_default
    traced_run(tmp_path, store)
    assert not isinstance(trace.get_tracer_provider(), TracerProvider), "nothing global"
    assert Agent._instrument_default == before


def test_an_agent_outside_a_trial_is_not_traced_after_close(
    tmp_path: Path, store: ProvisionedStore
) -> None:
    _, path = traced_run(tmp_path, store)
    count = len(read_spans(path))
    ModelAnalyst(FunctionModel(script)).answer(task(store))
    assert len(read_spans(path)) == count


def test_a_failing_trial_span_has_an_error_status(tmp_path: Path) -> None:
    tracing = Tracing(tmp_path, "gw0")
    with tracing.trial("n", "c/t1") as span:
        span.finish("wrong_value")
    tracing.close()
    (only,) = read_spans(tracing.exporter.path)
    assert only["status"] == "ERROR"
    assert only["status_description"] == "wrong_value"
    assert only["worker"] == "gw0"


def test_merge_orders_traces_by_their_first_span_and_skips_a_torn_line(tmp_path: Path) -> None:
    parts = tmp_path / "parts"
    parts.mkdir()

    def span(trace_id: str, span_id: str, start: int) -> str:
        return json.dumps({"trace_id": trace_id, "span_id": span_id, "start_ns": start})

    (parts / "traces-gw0.jsonl").write_text(
        span("b" * 32, "b2", 30) + "\n" + span("b" * 32, "b1", 10) + "\n" + '{"torn'
    )
    (parts / "traces-gw1.jsonl").write_text(span("a" * 32, "a1", 20) + "\n")
    assert merge_traces(tmp_path) == 3
    merged = read_spans(tmp_path / "traces.jsonl")
    assert [s["span_id"] for s in merged] == ["b1", "b2", "a1"]


def test_merge_without_traced_trials_writes_nothing(tmp_path: Path) -> None:
    assert merge_traces(tmp_path) is None
    assert not (tmp_path / "traces.jsonl").exists()


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_every_record_links_to_its_trial_trace(
    pytester: pytest.Pytester, workers: list[str]
) -> None:
    results = pytester.path / "results"
    outcome = pytester.runpytest_subprocess(
        *map(str, FEW),
        "--results-dir",
        str(results),
        "--run-id",
        "t",
        "-p",
        "no:randomly",
        *workers,
    )
    outcome.assert_outcomes(passed=len(FEW))
    run_dir = results / "t"
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    spans = read_spans(run_dir / "traces.jsonl")
    assert json.loads((run_dir / "run.json").read_text())["spans"] == len(spans)
    roots = {s["trace_id"]: s for s in spans if s["parent"] is None}
    assert len(roots) == len(records)
    for record in records:
        root = roots[record["trace_id"]]
        assert root["attributes"]["backintel.nodeid"] == record["nodeid"]
        assert root["attributes"]["backintel.outcome"] == record["outcome"]
        inner = [s["name"] for s in spans if s["trace_id"] == record["trace_id"]]
        assert sum(n.startswith("chat ") for n in inner) == record["usage"]["requests"]
        assert sum(n.startswith("execute_tool") for n in inner) >= record["usage"]["tool_calls"]
    assert {s["worker"] for s in spans} == ({"gw0", "gw1"} if workers else {"main"})
