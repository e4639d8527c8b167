"""What a run checks before its first item and what it keeps: model configuration as one
usage error, run folders that tell the truth, every token counted when a trial stops early,
and custom analysts held to the same limits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import helpers
import pytest

from pytest_backintel.collect.loading import load_scenario_file
from pytest_backintel.records.writer import NO_USAGE_TRIAL
from pytest_backintel.testing.model_server import Failure, ModelServer, Step, unused_url

FEW = helpers.FEW


def bench(
    pytester: pytest.Pytester,
    *args: str,
    paths: list[Path] = FEW,
    workers: tuple[str, ...] = ("-p", "no:xdist"),
) -> pytest.RunResult:
    results = pytester.path / "results"
    return pytester.runpytest_subprocess(
        *map(str, paths), f"--results-dir={results}", *workers, *args
    )


def records_of(pytester: pytest.Pytester, run_id: str) -> list[dict[str, Any]]:
    path = pytester.path / "results" / run_id / "records.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def run_json(pytester: pytest.Pytester, run_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((pytester.path / "results" / run_id / "run.json").read_text())
    return data


def assert_one_usage_error(result: pytest.RunResult, *needles: str) -> None:
    err = result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:] + err
    for needle in needles:
        assert needle in err
    assert "Traceback" not in err
    assert "INTERNALERROR" not in err + result.stdout.str()


# -- model configuration: one usage error before the first item -------------------------------


@pytest.mark.parametrize("workers", [("-p", "no:xdist"), ("-n", "2")], ids=["serial", "xdist"])
def test_a_model_without_its_key_is_one_usage_error_naming_the_key(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: tuple[str, ...]
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    model = ("--model", "anthropic:claude-sonnet-4-5")
    result = bench(pytester, *model, "--run-id", "k", workers=workers)
    assert_one_usage_error(result, "--model anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY")
    assert not (pytester.path / "results" / "k").exists(), "nothing ran, nothing is written"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "nope:x"], "no provider 'nope'"),
        (["--model", "openai:qwen3", "--model-base-url", unused_url()], "nothing answers there"),
    ],
    ids=["unknown-provider", "unreachable-base-url"],
)
def test_a_bad_model_configuration_is_one_usage_error(
    pytester: pytest.Pytester, args: list[str], needle: str
) -> None:
    assert_one_usage_error(bench(pytester, *args), needle)


def test_a_sandbox_that_cannot_run_is_one_usage_error_naming_the_fix(
    pytester: pytest.Pytester,
) -> None:
    from pytest_backintel.sandbox.base import SandboxUnavailable
    from pytest_backintel.sandbox.registry import create_provider

    try:  # only where no docker engine answers (the usual case on a developer's machine)
        create_provider("docker", pytester.path / "probe").setup_session()
    except SandboxUnavailable:
        pass
    else:
        pytest.skip("a docker engine answers here")
    result = bench(pytester, "--sandbox", "docker", "--run-id", "d")
    assert_one_usage_error(result, "docker")
    assert not (pytester.path / "results" / "d").exists()


# -- run folders ---------------------------------------------------------------------------------


def test_a_reused_run_id_is_refused_unless_appending(pytester: pytest.Pytester) -> None:
    bench(pytester, "--run-id", "same").assert_outcomes(passed=3)
    refused = bench(pytester, "--run-id", "same")
    assert_one_usage_error(refused, "already holds 3 trial records", "--append-run")
    assert len(records_of(pytester, "same")) == 3, "the earlier run is left as it was"
    bench(pytester, "--run-id", "same", "--append-run").assert_outcomes(passed=3)
    run = run_json(pytester, "same")
    assert run["trials_recorded"] == 6
    assert [a["records_before"] for a in run["appended"]] == [3]


@pytest.mark.parametrize(
    "args", [["--collect-only"], ["-k", "no_such_case"]], ids=["collect-only", "nothing-selected"]
)
def test_a_run_that_runs_no_scenario_creates_no_run_folder(
    pytester: pytest.Pytester, args: list[str]
) -> None:
    bench(pytester, "--run-id", "none", *args)
    assert not (pytester.path / "results").exists()


# -- every token counted ----------------------------------------------------------------------


def script_first(server: ModelServer, path: Path, last: Step) -> tuple[str, str]:
    """list_tables and run_sql with the case's check query, then `last`; (metric, sql)."""
    scenario = load_scenario_file(path)
    metric, sql = scenario.metrics[0].name, scenario.check_sql or "SELECT 1"
    steps = [Step.call("list_tables", usage=(700, 7)), Step.call("run_sql", {"sql": sql})]
    server.script(f"`{metric}`", [*steps, last])
    return metric, sql


def test_a_timeout_after_two_requests_keeps_their_tokens_in_the_record_and_the_budget(
    pytester: pytest.Pytester, model_server: ModelServer
) -> None:
    script_first(model_server, FEW[0], Step.answer([], [], failures=(Failure.hang(),)))
    result = bench(
        pytester,
        *("--model", "openai:qwen3", "--model-base-url", model_server.url, "--run-id", "t"),
        *("--analyst-timeout", "3", "--run-max-tokens", "1000000"),
        paths=[FEW[0]],
    )
    result.assert_outcomes(failed=1)
    (record,) = records_of(pytester, "t")
    assert record["outcome"] == "timeout"
    usage = record["usage"]
    assert (usage["requests"], usage["input_tokens"], usage["output_tokens"]) == (2, 800, 17)
    assert run_json(pytester, "t")["budget_spent"]["tokens"] == 817


def test_no_usage_from_the_provider_is_null_and_stops_a_token_budget(
    pytester: pytest.Pytester, model_server: ModelServer
) -> None:
    for path in FEW[:2]:
        scenario = load_scenario_file(path)
        metric = scenario.metrics[0].name
        model_server.script(f"`{metric}`", [Step.call("list_tables", usage=None)] * 2)
    result = bench(
        pytester,
        *("--model", "openai:qwen3", "--model-base-url", model_server.url, "--run-id", "u"),
        *("--run-max-tokens", "1000000", "--max-requests", "2"),
        *("--concurrency", "1"),  # the second trial starts after the first one reported
        paths=FEW[:2],
    )
    first, second = records_of(pytester, "u")
    assert first["usage"]["input_tokens"] is None
    assert first["usage"]["output_tokens"] is None
    assert first["cost_usd"] is None
    assert first["warnings"] == [NO_USAGE_TRIAL]
    assert second["outcome"] == "budget_exceeded"
    assert second["warnings"] == [], "a trial that never called the model has nothing unknown"
    assert "reported no token usage" in second["reasons"][0]["message"]
    header = run_json(pytester, "u")
    assert header["usage_unreported_trials"] == 1
    warning = "the provider reported no token usage for 1 trial(s)"
    assert [w.split(":")[0] for w in header["warnings"]] == [warning]
    assert f"backintel: WARNING: {warning}" in result.stdout.str()
    folder = pytester.path / "results" / "u"
    report = subprocess.run(
        [str(Path(sys.executable).parent / "backintel"), "report", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert report.returncode == 0, report.stderr
    scorecard = (folder / "scorecard.md").read_text()
    assert f"> **TOKEN USAGE UNKNOWN — {warning}" in scorecard
    assert "| input tokens | 0 + unknown (1 trial(s) reported no usage) |" in scorecard
    assert warning in (folder / "scorecard.html").read_text()


# -- custom analysts -----------------------------------------------------------------------------

CUSTOM = """
import time
from pytest_backintel.analyst_api import AnalystRun

class Slow:
    name, kind = "slow", "custom"
    def answer(self, task):
        time.sleep(60)

class Wrong:
    name, kind = "wrong", "custom"
    def answer(self, task):
        return {"metrics": []}

def slow(config):
    return Slow()

def wrong(config):
    return Wrong()
"""


def test_a_hung_custom_analyst_is_stopped_at_the_timeout_and_the_run_goes_on(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(custom_agent=CUSTOM)
    result = bench(
        pytester, "--analyst", "custom_agent:slow", "--analyst-timeout", "1", "--run-id", "s"
    )
    result.assert_outcomes(failed=3)
    records = records_of(pytester, "s")
    assert [r["outcome"] for r in records] == ["timeout"] * 3
    assert "--analyst-timeout" in records[0]["reasons"][0]["message"]


def test_a_custom_analyst_returning_the_wrong_type_is_an_analyst_error_saying_why(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(custom_agent=CUSTOM)
    result = bench(pytester, "--analyst", "custom_agent:wrong", "--run-id", "w")
    result.assert_outcomes(failed=3)
    records = records_of(pytester, "w")
    assert [r["outcome"] for r in records] == ["analyst_error"] * 3
    message = records[0]["reasons"][0]["message"]
    assert "answer() must return pytest_backintel.analyst_api.AnalystRun" in message
    assert "got dict" in message


def test_the_method_hash_covers_the_custom_analysts_own_files(pytester: pytest.Pytester) -> None:
    package = pytester.mkpydir("their_agent")
    (package / "agent.py").write_text(CUSTOM)
    args = ["--analyst", "their_agent.agent:wrong", "-k", "item-grain"]
    bench(pytester, *args, "--run-id", "v1")
    (package / "prompt.md").write_text("Be careful.\n")
    bench(pytester, *args, "--run-id", "v2")
    first, second = run_json(pytester, "v1"), run_json(pytester, "v2")
    assert first["method_hash"]
    assert second["method_hash"]
    assert first["method_hash"] != second["method_hash"]


# -- replay and progress -----------------------------------------------------------------------


def test_a_replay_keeps_the_recorded_model_id_and_limits(
    pytester: pytest.Pytester, model_server: ModelServer
) -> None:
    scenario = load_scenario_file(FEW[0])
    metric, sql = script_first(model_server, FEW[0], Step.prose("unused"))
    model_server.reset()
    evidence = [{"id": "e1", "kind": "sql", "code": sql, "metrics": [metric]}]
    answer = Step.answer([{"name": metric, "value": 1, "unit": scenario.metrics[0].unit}], evidence)
    model_server.script(f"`{metric}`", [Step.call("list_tables"), answer])
    model = ("--model", "openai:qwen3", "--model-base-url", model_server.url)
    bench(pytester, *model, "--max-tool-calls", "17", "--record", "--run-id", "rec", paths=[FEW[0]])
    recorded = pytester.path / "results" / "rec"
    bench(pytester, "--analyst", f"replay:{recorded}", "--run-id", "rep", paths=[FEW[0]])
    replay = run_json(pytester, "rep")
    assert replay["model"] == "openai:qwen3"
    assert replay["limits"]["max_tool_calls"] == 17
    assert records_of(pytester, "rep")[0]["model"] == "openai:qwen3"


def test_progress_lines_name_each_case_and_its_usage_and_quiet_hides_them(
    pytester: pytest.Pytester,
) -> None:
    shown = bench(pytester, "--run-id", "p1").stdout.str()
    assert "backintel: running scenario l1-item-grain v1 trial 1" in shown
    assert "backintel: l1-item-grain t1: pass in " in shown
    assert " requests, " in shown
    assert (
        "backintel: pass rate by level: 1 2/2 (100% [34%, 100%]), 3 1/1 (100% [21%, 100%])" in shown
    )
    quiet = bench(pytester, "--run-id", "p2", "-q").stdout.str()
    assert "backintel: running" not in quiet
    assert "backintel: l1-item-grain t1" not in quiet
