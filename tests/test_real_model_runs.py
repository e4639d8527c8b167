"""The README's real-model command, run as a user runs it: `pytest -m development -k <cases>
--model openai:<name> --model-base-url <server>` from the repository root (whose `testpaths`
include `tests`, so this also proves the harness's own model-request guard stays out of a
benchmark run), against the scripted OpenAI-compatible test server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_backintel.collect.loading import find_scenarios
from pytest_backintel.testing.model_server import Failure, ModelServer, Step
from reports.compare import compare_runs
from reports.load import load_run
from reports.summary import summarize

ROOT = Path(__file__).resolve().parents[1]
CASES = ("l1-delivered-orders", "l1-canceled-orders-2018", "l1-average-review-score")
SELECT = " or ".join(CASES)
USAGE = ((1000, 11), (1200, 22), (1500, 33))
"""Prompt and completion tokens the server reports for the three requests of each trial."""


def reference_values(case: str) -> dict[str, Any]:
    refs = json.loads((ROOT / "scenarios" / "references" / "olist.json").read_text())
    values: dict[str, Any] = refs["references"][case]["values"]
    return values


def script_case(server: ModelServer, case: str, *, off_by: float = 0) -> None:
    """list_tables, run_sql with the case's check query, then its answer (`off_by` wrong)."""
    _, scenario = find_scenarios()[case]
    (metric,) = scenario.metrics
    assert scenario.check_sql is not None
    value = reference_values(case)[metric.name] + off_by
    evidence = {"id": "e1", "kind": "sql", "code": scenario.check_sql, "metrics": [metric.name]}
    server.script(
        f"`{metric.name}`",
        [
            Step.call("list_tables", usage=USAGE[0]),
            Step.call("run_sql", {"sql": scenario.check_sql}, usage=USAGE[1]),
            Step.answer(
                [{"name": metric.name, "value": value, "unit": metric.unit}],
                [evidence],
                usage=USAGE[2],
            ),
        ],
    )


def run_from_root(
    server: ModelServer, results: Path, run_id: str, *args: str
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]], dict[str, Any]]:
    cmd = [sys.executable, "-m", "pytest", "-m", "development", "-k", SELECT]
    cmd += ["--model", "openai:qwen3", "--model-base-url", server.url]
    # `--opt=value`: pytest would take a separate existing-folder value for the rootdir
    cmd += [f"--results-dir={results}", "--run-id", run_id, *args]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    run_dir = results / run_id
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    records = sorted((json.loads(line) for line in lines), key=lambda r: r["scenario_id"])
    return done, records, json.loads((run_dir / "run.json").read_text())


@pytest.mark.parametrize("workers", [["-p", "no:xdist"], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_documented_command_reaches_the_server_and_scores_its_answers(
    model_server: ModelServer, tmp_path: Path, workers: list[str]
) -> None:
    script_case(model_server, CASES[0])
    script_case(model_server, CASES[1], off_by=1)
    script_case(model_server, CASES[2])
    done, records, run = run_from_root(model_server, tmp_path, "real", *workers)
    outcomes = {r["scenario_id"]: r["outcome"] for r in records}
    assert outcomes == {CASES[0]: "pass", CASES[1]: "wrong_value", CASES[2]: "pass"}, done.stdout
    assert done.returncode == 1, "the wrong answer fails its item"
    assert "1 wrong_value, 2 pass" in done.stdout or "2 pass, 1 wrong_value" in done.stdout
    for record in records:  # the server's exact counts, summed over the trial's 3 requests
        assert record["usage"]["requests"] == 3
        assert record["usage"]["input_tokens"] == sum(u[0] for u in USAGE)
        assert record["usage"]["output_tokens"] == sum(u[1] for u in USAGE)
        assert record["model"] == "openai:qwen3"
    assert {r.model for r in model_server.requests} == {"qwen3"}, "the bare name is sent"
    assert len(model_server.requests) == 9
    assert (run["model_api"], run["model_base_url"]) == ("chat_completions", model_server.url)
    assert f"analyst openai:qwen3 (API chat_completions at {model_server.url})" in done.stdout


def test_provider_failures_are_blocked_and_stop_the_run(
    model_server: ModelServer, tmp_path: Path
) -> None:
    for case in CASES:
        script_case(model_server, case)
    good_dir = tmp_path / "good"
    run_from_root(model_server, good_dir, "base", "-p", "no:xdist")
    model_server.reset()
    for case in CASES:  # every attempt fails: 500 for two cases, then 429 with Retry-After
        failure = Failure.http(500) if case != CASES[2] else Failure.rate_limited(0.2)
        _, scenario = find_scenarios()[case]
        model_server.script(f"`{scenario.metrics[0].name}`", [Step(failures=(failure,) * 9)])
    done, records, run = run_from_root(
        model_server,
        good_dir,
        "down",
        "-p",
        "no:xdist",
        "--max-provider-failures",
        "2",
        "--concurrency",
        "1",  # serially, the third trial is the first one after the streak
    )
    by_case = {r["scenario_id"]: r for r in records}
    failed = [by_case[c] for c in sorted(CASES)[:2]]
    assert [r["outcome"] for r in failed] == ["provider_error", "provider_error"], done.stdout
    for record in failed:
        assert len(record["provider_retries"]) == 4, "bounded: 4 attempts, each recorded"
        assert [r["attempt"] for r in record["provider_retries"]] == [1, 2, 3, 4]
    stopped = by_case[sorted(CASES)[2]]
    assert stopped["outcome"] == "not_run"
    assert "--max-provider-failures 2" in stopped["reasons"][0]["message"]
    assert run["outcomes"] == {"not_run": 1, "provider_error": 2}
    assert "--max-provider-failures 2" in done.stdout
    # neither the scorecard nor compare counts a provider failure as a failed answer
    overall = summarize(load_run(good_dir / "down")).overall
    assert (overall.failed, overall.blocked, overall.not_run) == (0, 2, 1)
    result = compare_runs(load_run(good_dir / "base"), load_run(good_dir / "down"))
    changes = {c.scenario_id: c.change for s in result.suites for c in s.cases}
    assert set(changes.values()) == {"blocked"}
    assert not result.accepted, "an unmeasured candidate cannot be accepted"


def _most_at_once(server: ModelServer) -> int:
    """The most requests the server was answering at one moment."""
    events = sorted(
        [(r.received_at, 1) for r in server.requests]
        + [(r.answered_at or r.received_at, -1) for r in server.requests]
    )
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


@pytest.mark.parametrize("cap", [3, None], ids=["max-connections-3", "no-cap"])
def test_max_connections_caps_what_the_server_sees_at_once(
    model_server: ModelServer, tmp_path: Path, cap: int | None
) -> None:
    case = CASES[0]
    _, scenario = find_scenarios()[case]
    (metric,) = scenario.metrics
    evidence = {"id": "e1", "kind": "sql", "code": scenario.check_sql, "metrics": [metric.name]}
    value = reference_values(case)[metric.name]
    model_server.script(
        f"`{metric.name}`",
        [
            Step.call("list_tables", delay_s=0.3),
            Step.call("run_sql", {"sql": scenario.check_sql}, delay_s=0.3),
            Step.answer([{"name": metric.name, "value": value, "unit": metric.unit}], [evidence]),
        ],
    )
    cmd = [sys.executable, "-m", "pytest", "-m", "development", "-k", case, "-p", "no:xdist"]
    cmd += ["--model", "openai:qwen3", "--model-base-url", model_server.url, "--trials", "9"]
    cmd += ["--concurrency", "9", f"--results-dir={tmp_path}", "--run-id", "capped"]
    cmd += ["--max-connections", str(cap)] if cap else []
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "capped" / "records.jsonl").open()]
    assert [r["outcome"] for r in records] == ["pass"] * 9
    assert len(model_server.requests) == 27
    if cap:
        assert _most_at_once(model_server) == cap
        assert json.loads((tmp_path / "capped" / "run.json").read_text())["max_connections"] == 3
    else:
        assert _most_at_once(model_server) > 3  # what the cap above holds back
