"""A suite file's `analyst:` chooses the analyst of every run of its folder: a real external
agent (`cmd:`, its paths relative to the suite file) answers in its sandbox over MCP;
`--analyst` on the command line chooses instead; a bad value is a usage error naming the suite
file's line and what is allowed."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import shop_suite

from pytest_backintel.sandbox.bwrap import find_bwrap

AGENT = Path(__file__).parent / "agents" / "mcp_agent.py"
SQL = "SELECT COUNT(*) AS delivered_orders FROM orders WHERE status = 'delivered'"
QUESTION = "How many orders were delivered?"

DOC = Path(__file__).resolve().parents[1] / "docs" / "external-agents.md"
SECTION = DOC.read_text().split("## The same in a suite file", 1)[1].split("\n## ", 1)[0]
(SUITE,) = re.findall(r"```yaml file=shop/backintel-suite.yaml\n(.*?)```", SECTION, re.S)
"""The page's suite file, as the page shows it."""
(COMMAND,) = re.findall(r"^    (uv run pytest .*)$", SECTION, re.M)
"""The page's command."""
SPEC = "cmd:python ../agents/my_agent.py"
ANALYST_LINE = 6

SCENARIO = f"""
id: delivered-orders
version: 1
title: delivered
question: {QUESTION}
level: 1
family: counts
answerable: true
metrics:
  - {{name: delivered_orders, kind: count, unit: rows}}
reference:
  sql: {SQL}
"""


@pytest.fixture
def repo(pytester: pytest.Pytester) -> pytest.Pytester:
    agents = pytester.path / "agents"  # the agent's own folder, beside the suite
    agents.mkdir()
    shutil.copy(AGENT, agents / "my_agent.py")  # the test agent: answers over MCP
    plan = {
        "mode": "reference",
        "questions": {QUESTION: {"sql": SQL, "units": {"delivered_orders": "rows"}}},
    }
    (agents / "plan.json").write_text(json.dumps(plan))
    shop_suite(pytester, "shop", SUITE, SCENARIO)
    return pytester


def _records(repo: pytest.Pytester, run_id: str) -> list[dict[str, Any]]:
    text = (repo.path / "results" / run_id / "records.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.skipif(find_bwrap() is None, reason="bubblewrap is not installed")
def test_a_suite_files_external_agent_answers_from_its_sandbox(repo: pytest.Pytester) -> None:
    # the page's command; `../agents/my_agent.py` is relative to the suite file's folder, not
    # to where pytest runs
    assert SPEC in SUITE
    args = COMMAND.split()
    assert args[:3] == ["uv", "run", "pytest"]
    result = repo.runpytest_subprocess(*args[3:], "-p", "no:xdist")
    result.assert_outcomes(passed=1)
    (record,) = _records(repo, "shop-agent")
    assert record["outcome"] == "pass"
    tools = [c["tool"] for c in record["tool_calls"]]
    assert tools[-2:] == ["run_sql", "submit_answer"]
    assert all(c["source"] == "mcp" for c in record["tool_calls"])
    external = record["external"]
    assert external["sandboxed"] is True
    assert external["answered_by"] == "tool"
    header = json.loads((repo.path / "results" / "shop-agent" / "run.json").read_text())
    assert header["analyst"]["spec"] == SPEC
    assert header["analyst"]["kind"] == "external"
    suite = repo.path / "shop" / "backintel-suite.yaml"
    assert header["analyst"]["suite_file"] == f"{suite}:{ANALYST_LINE}"
    assert "unsafe" not in header["analyst"]


def test_the_command_lines_analyst_chooses_over_the_suite_files(repo: pytest.Pytester) -> None:
    result = repo.runpytest_subprocess(
        "shop", "-p", "no:xdist", "--analyst", "refuse-all", "--run-id", "c"
    )
    result.assert_outcomes(failed=1)  # the question is answerable: a refusal fails it
    (record,) = _records(repo, "c")
    assert "external" not in record
    header = json.loads((repo.path / "results" / "c" / "run.json").read_text())
    assert header["analyst"]["spec"] == "refuse-all"
    assert "suite_file" not in header["analyst"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "replay:results/rec",
            "'replay:results/rec': a replay is chosen per run, on the command line",
        ),
        (
            "42",
            "a text naming the analyst (reference, refuse-all, perturbed, unsupported, careless, "
            "model, cmd:COMMAND or pkg.module:callable), got 42",
        ),
        ("gpt-5", "'gpt-5' is not an analyst: use one of reference,"),
        ("'cmd:  '", 'give the agent\'s command, as in cmd:"python my_agent.py"'),
    ],
)
def test_a_bad_analyst_in_a_suite_file_names_its_line(
    repo: pytest.Pytester, value: str, message: str
) -> None:
    suite = repo.path / "shop" / "backintel-suite.yaml"
    suite.write_text(SUITE.replace(SPEC, value))
    result = repo.runpytest_subprocess("shop", "-p", "no:xdist", "--run-id", "bad")
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()  # a collection error
    assert f"{suite}:{ANALYST_LINE}: analyst: {message}" in result.stdout.str()
    assert not (repo.path / "results" / "bad" / "records.jsonl").exists()


def test_an_agent_folder_holding_the_suite_is_refused(repo: pytest.Pytester) -> None:
    suite = repo.path / "shop" / "backintel-suite.yaml"
    shutil.copy(AGENT, suite.parent / "my_agent.py")  # the scenarios would be mounted with it
    suite.write_text(SUITE.replace("../agents/my_agent.py", "my_agent.py"))
    result = repo.runpytest_subprocess("shop", "-p", "no:xdist")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    err = result.stderr.str()
    assert f"{suite}:{ANALYST_LINE}: analyst (from the suite file): --analyst" in err
    assert f"the agent's folder {suite.parent} holds the suite file's folder" in err
