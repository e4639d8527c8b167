"""The example agents of `docs/agents.md` (`examples/agents/`), measured by the commands the
page shows, run as written (the port aside): the scripted model server started from its
command line with `examples/agents/scripts.json`, then each agent as `--analyst cmd:...` in
its sandbox, with the trial's tools over MCP and the scripted model behind the run's model
gateway. On development scenarios of three levels the scripted model runs the scenario's
query, reads the result the tool returned and submits it: every trial passes, its tool calls
are the MCP server's, and its token counts are exactly those the scripted server sent."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_backintel.collect.loading import DEFINITIONS_DIR
from pytest_backintel.sandbox.bwrap import find_bwrap
from pytest_backintel.testing.model_script import Step, parse_steps

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "agents.md"
SCRIPTS = ROOT / "examples" / "agents" / "scripts.json"
SCENARIOS = [
    DEFINITIONS_DIR / "level1" / "l1-item-grain.scenario.yaml",
    DEFINITIONS_DIR / "level2" / "l2-average-order-value-2018.scenario.yaml",
    DEFINITIONS_DIR / "level3" / "l3-delivered-without-review.scenario.yaml",
]
DOC_PORT = "8765"


def documented() -> list[str]:
    """The commands on the page (its indented code lines), in order."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.startswith("    ") and line.strip()]


COMMANDS = documented()
SERVER = next(c for c in COMMANDS if "testing.model_server" in c)
NPM = next(c for c in COMMANDS if c.startswith("npm "))
AGENTS = {
    c.split('"cmd:')[1].split('"')[0]: c
    for c in COMMANDS
    if '"cmd:' in c and "--record" not in c and "replay:" not in c
}
"""The agent's command -> the documented run that measures it on three levels."""
RECORD = next(c for c in COMMANDS if "--record" in c)
REPLAY = next(c for c in COMMANDS if "--model replay:" in c)


def test_the_page_shows_four_agents_and_how_to_serve_their_model() -> None:
    assert sorted(AGENTS) == [
        "node examples/agents/node/agent.mjs",
        "python examples/agents/langgraph_agent.py",
        "python examples/agents/openai_agents_agent.py",
        "python examples/agents/pydantic_ai_agent.py",
    ]
    assert all(c.startswith("uv run ") for c in (SERVER, *AGENTS.values()))
    assert NPM == "npm ci --prefix examples/agents/node"


def test_the_scripts_are_the_scenarios_reference_queries() -> None:
    """scripts.json does not drift from the scenarios: the query each scripted conversation
    runs, and cites, is its scenario's check query, and it asks for every metric."""
    scripts = json.loads(SCRIPTS.read_text())
    assert len(scripts) == len(SCENARIOS)
    for path in SCENARIOS:
        data = yaml.safe_load(path.read_text())
        match = next(m for m in scripts if m.lower() in " ".join(data["question"].split()).lower())
        query, answer, _done = scripts[match]
        assert query["args"]["sql"] == data["check_sql"]
        body = answer["answer_from_result"]
        assert body["evidence"][0]["code"] == data["check_sql"]
        assert [m["name"] for m in body["metrics"]] == [m["name"] for m in data["metrics"]]
    parse_steps(scripts)  # and the server reads them


def _free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def _python(command: str, port: str) -> list[str]:
    """A documented `uv run ...` command as this interpreter runs it, on `port`."""
    words = shlex.split(command.replace(DOC_PORT, port))
    assert words[:2] == ["uv", "run"], command
    return [sys.executable, "-m", *words[2:]]


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[str, list[str]]]:
    """The scripted model server, started by the page's command; its base URL, and what it
    printed when it stopped."""
    port = _free_port()
    words = shlex.split(SERVER.replace(DOC_PORT, port))[2:]  # python -m ...
    words[0] = sys.executable
    proc = subprocess.Popen(words, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    printed: list[str] = []
    try:
        assert url == f"http://127.0.0.1:{port}/v1", url
        yield url, printed
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
        printed.append(out)


def _npm_ready() -> str | None:
    """Why the Node agent cannot run here (None: it can, after the page's `npm ci`)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "node and npm are not installed (CI installs them: ci/run.sh)"
    done = subprocess.run(
        shlex.split(NPM), cwd=ROOT, capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode == 0, f"`{NPM}` failed: {done.stderr[-2000:]}"
    return None


TOKENS_IN, TOKENS_OUT = 1200 + 1900 + 2300, 40 + 120 + 12
"""What scripts.json says the scripted model reports over one trial's three turns."""


@pytest.mark.skipif(find_bwrap() is None, reason="bubblewrap is not installed")
@pytest.mark.parametrize("agent", sorted(AGENTS), ids=lambda a: a.replace(" ", "-"))
def test_each_example_agent_passes_three_levels_measured_by_the_gateway(
    agent: str, scripted: tuple[str, list[str]], tmp_path: Path
) -> None:
    url, _ = scripted
    if agent.startswith("node") and (why := _npm_ready()) is not None:
        pytest.skip(why)
    port = url.rsplit(":", 1)[1].split("/")[0]
    args = _python(AGENTS[agent], port)
    results = tmp_path / "results"
    done = subprocess.run(
        [*args, f"--results-dir={results}", "--run-id=r", "-p", "no:xdist"],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))},
    )  # fmt: skip
    path = results / "r" / "records.jsonl"
    assert path.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(r["level"] for r in records) == [1, 2, 3], done.stdout[-3000:]
    for record in records:
        assert record["outcome"] == "pass", json.dumps(record, indent=1)[:4000]
        assert [c["tool"] for c in record["tool_calls"]] == ["run_sql", "submit_answer"]
        assert all(c["source"] == "mcp" for c in record["tool_calls"])
        assert record["usage_source"] == "gateway"
        usage = record["usage"]
        assert (usage["requests"], usage["input_tokens"], usage["output_tokens"]) == (
            3,
            TOKENS_IN,
            TOKENS_OUT,
        )
        assert record["evidence"]
        assert all(e["reproduced"] for e in record["evidence"])
    assert done.returncode == 0, done.stdout[-3000:]


def _run(command: str, port: str, results: Path, run_id: str) -> list[dict[str, Any]]:
    """Run a documented pytest command with its results under `results` (its run id given
    as `run_id`, or added); its records."""
    args = _python(command.replace("results/", f"{results}/"), port)
    if "--run-id" not in args:
        args.append(f"--run-id={run_id}")
    done = subprocess.run(
        [*args, f"--results-dir={results}", "-p", "no:xdist"],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))},
    )  # fmt: skip
    path = results / run_id / "records.jsonl"
    assert path.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.skipif(find_bwrap() is None, reason="bubblewrap is not installed")
def test_a_recorded_agent_run_replays_offline_with_the_same_answer_and_tokens(
    scripted: tuple[str, list[str]], tmp_path: Path
) -> None:
    url, _ = scripted
    port = url.rsplit(":", 1)[1].split("/")[0]
    recorded = _run(RECORD, port, tmp_path / "results", "agent-rec")
    assert "--model-base-url" not in REPLAY, "the replay has no model to call"
    replayed = _run(REPLAY, port, tmp_path / "results", "replayed")
    assert [r["outcome"] for r in recorded] == [r["outcome"] for r in replayed] == ["pass"]
    first, again = recorded[0], replayed[0]
    assert again["answer"] == first["answer"]
    assert again["usage"] == first["usage"]
    assert again["usage"]["input_tokens"] == 1200 + 1900 + 2300
    assert [c["args"] for c in again["tool_calls"]] == [c["args"] for c in first["tool_calls"]]


def test_the_scripted_answer_is_read_from_the_tool_result() -> None:
    """The values come from the conversation, so a wrong query gives a wrong answer."""
    metrics = [{"name": "n", "unit": "count"}, {"name": "r", "unit": "ratio"}]
    step = Step.answer_from_result("submit_answer", metrics, [])
    args: Any = step.filled("n\tr\n42\t0.25\n(1 row)").tool_calls[0][1]
    assert [m["value"] for m in args["metrics"]] == [42, 0.25]
    args = step.filled("other\n1").tool_calls[0][1]
    assert [m["value"] for m in args["metrics"]] == [None, None]
