"""External agents (`--analyst cmd:...`): a real MCP client script in its own bubblewrap
sandbox answers through the trial's MCP tools; every way it can end is a recorded outcome."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_backintel.collect.loading import DEFINITIONS_DIR
from pytest_backintel.sandbox.bwrap import find_bwrap
from pytest_backintel.testing.model_server import ModelServer, Step

AGENT = Path(__file__).parent / "agents" / "mcp_agent.py"
SCENARIOS = [
    DEFINITIONS_DIR / "level1" / "l1-item-grain.scenario.yaml",
    DEFINITIONS_DIR / "level2" / "l2-average-order-value-2018.scenario.yaml",
    DEFINITIONS_DIR / "level3" / "l3-delivered-without-review.scenario.yaml",
    DEFINITIONS_DIR / "level3" / "l3-delivered-missing-timestamp.scenario.yaml",
    DEFINITIONS_DIR / "level2" / "l2-category-grain-2018.scenario.yaml",
]
"""Answerable development scenarios of three levels whose check query returns one row."""

pytestmark = pytest.mark.skipif(find_bwrap() is None, reason="bubblewrap is not installed")


def _questions() -> dict[str, Any]:
    found = {}
    for path in SCENARIOS:
        data = yaml.safe_load(path.read_text())
        units = {m["name"]: m["unit"] for m in data["metrics"]}
        found[data["question"]] = {"sql": data["check_sql"], "units": units}
    return found


def agent_folder(tmp_path: Path, mode: str, **plan: Any) -> Path:
    """The test agent and its plan in a folder of its own (mounted read-only in its sandbox)."""
    folder = tmp_path / "agent"
    folder.mkdir(exist_ok=True)
    shutil.copy(AGENT, folder / AGENT.name)
    plan = {"mode": mode, "questions": _questions(), **plan}
    (folder / "plan.json").write_text(json.dumps(plan))
    return folder


def run(
    pytester: pytest.Pytester, folder: Path, scenarios: list[Path], *args: str, run_id: str = "r"
) -> tuple[pytest.RunResult, list[dict[str, Any]]]:
    results = pytester.path / "results"
    outcome = pytester.runpytest_subprocess(
        *map(str, scenarios),
        f"--analyst=cmd:python {folder / AGENT.name}",
        "--results-dir",
        str(results),
        "-p",
        "no:randomly",
        "-p",
        "no:xdist",
        *(("--run-id", run_id) if "--resume" not in args else ()),
        *args,
    )
    path = results / run_id / "records.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return outcome, records


def by_scenario(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["scenario_id"]: r for r in records}


def test_an_external_agent_answers_three_levels_through_the_mcp_tools(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    folder = agent_folder(tmp_path, "reference")
    outcome, records = run(pytester, folder, SCENARIOS[:3], "--concurrency", "3")
    outcome.assert_outcomes(passed=3)
    assert sorted(r["level"] for r in records) == [1, 2, 3]
    for record in records:
        assert record["outcome"] == "pass"
        calls = record["tool_calls"]
        assert [c["tool"] for c in calls] == [
            "list_tables",
            "describe_table",
            "run_python",
            "run_sql",
            "submit_answer",
        ]
        assert all(c["source"] == "mcp" and c["result_bytes"] > 0 for c in calls)
        assert all(c["error"] is None for c in calls)
        assert "order_items" in record["external"]["stderr_tail"]  # run_python's output
        assert calls[3]["args"]["sql"] == record["answer"]["evidence"][0]["code"]
        assert record["usage"]["tool_calls"] == 5
        assert record["usage_source"] == "none"  # no gateway in this run: nothing measured
        assert record["usage"]["input_tokens"] is None
        assert record["external"]["sandboxed"] is True
        assert record["external"]["answered_by"] == "tool"
        tools = "list_tables,describe_table,run_sql,run_python,submit_answer,refuse"
        assert f"tools: {tools}" in record["external"]["stderr_tail"]  # the item's sandbox too
        assert record["evidence"]
        assert all(e["reproduced"] for e in record["evidence"])
        assert "unsafe" not in record
    spans = (pytester.path / "results" / "r" / "traces.jsonl").read_text()
    assert spans.count('"mcp tool run_sql"') == 3


def test_an_answer_printed_on_stdout_is_scored_and_a_wrong_one_fails(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    questions = _questions()
    first = next(iter(questions))
    # the same agent, its evidence for the first question swapped for another's: still an
    # answer, but its values are not the reference's
    other = list(questions.values())[2]["sql"]
    questions[first] = {**questions[first], "sql": other}
    folder = agent_folder(tmp_path, "stdout")
    plan = json.loads((folder / "plan.json").read_text())
    (folder / "plan.json").write_text(json.dumps({**plan, "questions": questions}))
    _outcome, records = run(pytester, folder, SCENARIOS[:2])
    found = by_scenario(records)
    assert found["l2-average-order-value-2018"]["outcome"] == "pass"
    assert found["l2-average-order-value-2018"]["external"]["answered_by"] == "stdout"
    assert found["l1-item-grain"]["outcome"] != "pass"


def test_every_way_an_agent_ends_is_recorded_and_resume_finishes_the_run(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    q = list(_questions())
    modes = {q[0]: "sigkill", q[1]: "hang", q[2]: "silent", q[3]: "twice", q[4]: "after"}
    folder = agent_folder(tmp_path, "reference", modes=modes)
    # stopped after the first failure: the run is unfinished
    _, first = run(pytester, folder, SCENARIOS, "--analyst-timeout", "10", "--maxfail", "1")
    assert [r["scenario_id"] for r in first] == ["l1-item-grain"]
    _outcome, records = run(pytester, folder, SCENARIOS, "--analyst-timeout", "10", "--resume", "r")
    found = by_scenario(records)
    assert len(records) == len(SCENARIOS)
    killed = found["l1-item-grain"]
    assert killed["outcome"] == "analyst_error"
    assert "killed by signal 9" in killed["analyst_error"]
    hung = found["l2-average-order-value-2018"]
    assert hung["outcome"] == "timeout"
    assert hung["external"]["limit_hit"] == "wall_time"
    silent = found["l3-delivered-without-review"]
    assert silent["outcome"] == "analyst_error"
    assert "exited without an answer" in silent["analyst_error"]
    twice = found["l3-delivered-missing-timestamp"]
    assert twice["outcome"] == "analyst_error"
    assert "twice" in twice["analyst_error"]
    assert twice["tool_calls"][-1]["second_answer"]
    assert twice["tool_calls"][-1]["refused"]
    after = found["l2-category-grain-2018"]
    assert after["outcome"] == "pass"  # the answer stands; the late call is refused, recorded
    assert after["tool_calls"][-1]["tool"] == "list_tables"
    assert after["tool_calls"][-1]["after_answer"]
    assert after["external"]["calls_after_answer"] == 1


def test_a_crash_a_malformed_answer_and_a_tool_call_flood_are_recorded_outcomes(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    q = list(_questions())
    modes = {q[0]: "crash", q[1]: "malformed", q[2]: "flood"}
    folder = agent_folder(tmp_path, "reference", modes=modes)
    _, records = run(pytester, folder, SCENARIOS[:3], "--max-tool-calls", "3")
    found = by_scenario(records)
    flood = found["l3-delivered-without-review"]
    assert flood["outcome"] == "budget_exceeded"
    assert [c["refused"] for c in flood["tool_calls"]][:4] == [False, False, False, True]
    assert flood["usage"]["tool_calls"] == 3
    crash = found["l1-item-grain"]
    assert crash["outcome"] == "analyst_error"
    assert "exited with code 1" in crash["analyst_error"]
    assert "the agent's own bug" in crash["external"]["stderr_tail"]
    malformed = found["l2-average-order-value-2018"]
    assert malformed["outcome"] == "analyst_error"
    assert "malformed answer" in malformed["analyst_error"]


def test_a_hostile_agent_reads_nothing_it_is_measured_against(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    project = pytester.path
    lock = project / "backintel.lock"
    lock.write_text("SECRET-REFERENCE 42\n")
    (project / "results").mkdir()
    (project / "results" / "secret.txt").write_text("SECRET-RESULT\n")
    data = Path(__import__("os").environ["BACKINTEL_DATA_DIR"])
    stores = sorted(p for p in data.rglob("*.sqlite") if p.is_file())[:2]
    forbidden = [
        str(SCENARIOS[0]),  # the scenario file, with its check query
        str(lock),
        str(project / "results" / "secret.txt"),
        *map(str, stores),  # the store's files and another dataset's
        "/data/store",
        str(Path.home() / ".ssh" / "id_rsa"),
    ]
    folder = agent_folder(
        tmp_path,
        "hostile",
        forbidden_files=forbidden,
        forbidden_ports=[["127.0.0.1", 5432], ["127.0.0.1", 3306]],
    )
    _, records = run(pytester, folder, SCENARIOS[:1])
    (record,) = records
    assert record["outcome"] == "pass"  # it answered through its tools; nothing else reached
    attempts = record["answer"]["caveats"]
    assert len(attempts) == len(forbidden) + 4
    assert all(": refused (" in line for line in attempts), attempts
    assert "SECRET" not in json.dumps(record["answer"])
    stderr = record["external"]["stderr_tail"]
    assert all(line in stderr for line in attempts)  # recorded, as the agent saw it
    refused = {r["reason"] for r in record["external"]["refused_requests"]}
    assert refused == {"not this trial's path", "no bearer token"}
    assert [c["tool"] for c in record["tool_calls"]].count("list_tables") == 1


def test_the_agents_model_requests_are_measured_by_the_gateway(
    pytester: pytest.Pytester, tmp_path: Path, model_server: ModelServer
) -> None:
    model_server.script("", [Step.prose("count the item rows", usage=(321, 17))])
    folder = agent_folder(tmp_path, "model")
    model = ("--model", "openai:qwen3", "--model-base-url", model_server.url)
    outcome, records = run(pytester, folder, SCENARIOS[:1], *model, "--record")
    outcome.assert_outcomes(passed=1)
    (record,) = records
    assert record["usage_source"] == "gateway"
    assert record["usage"]["requests"] == 1
    assert (record["usage"]["input_tokens"], record["usage"]["output_tokens"]) == (321, 17)
    assert "model said: count the item rows" in record["external"]["stderr_tail"]
    assert "sk-" not in json.dumps(record)  # no provider key anywhere
    cassettes = pytester.path / "results" / "r" / "cassettes" / "l1-item-grain"
    (exchange,) = json.loads((cassettes / "t1.exchanges.json").read_text())
    assert "count the item rows" in json.dumps(exchange)


def test_an_unsandboxed_agent_is_labelled_unsafe_everywhere(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    folder = agent_folder(tmp_path, "reference")
    outcome, records = run(pytester, folder, SCENARIOS[:1], "--analyst-unsandboxed")
    outcome.assert_outcomes(passed=1)
    assert "UNSAFE" in records[0]["unsafe"]
    assert records[0]["external"]["sandboxed"] is False
    assert "UNSAFE" in records[0]["warnings"][0]  # the viewer shows each record's warnings
    run_dir = pytester.path / "results" / "r"
    run_json = json.loads((run_dir / "run.json").read_text())
    assert "UNSAFE" in run_json["analyst"]["unsafe"]
    assert "UNSAFE" in run_json["analyst"]["label"]
    assert "UNSAFE" in run_json["warnings"][0]  # the scorecard lists the run's warnings
    report = subprocess.run(
        [str(Path(sys.executable).parent / "backintel"), "report", str(run_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert report.returncode == 0, report.stderr
    assert "UNSAFE" in (run_dir / "scorecard.md").read_text()
