"""The external path's cost per trial beyond the agent's own time, against the in-process path.

One small task (a five-row SQLite store, "How many orders?"): the same MCP-client agent
(`tests/agents/mcp_agent.py`, reference mode: list_tables, describe_table, run_sql,
submit_answer) run
- directly: a plain child process on the host against an MCP server already serving (the
  agent's own time: its interpreter, imports and calls);
- as `--analyst cmd:` does it: `ExternalAnalyst.answer` (a new MCP server and token, the agent
  in bubblewrap with the forwarder, the server closed, the ending judged).
The external path's own cost is the difference of the medians. A second, stdlib-only agent
that prints its answer at once (no imports, no tool calls) shows the path's fixed cost per
trial without the noise of the MCP agent's seconds of imports. The in-process figure is the
built-in `reference` analyst's `answer` on the same task. Nothing is asserted.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import orders_store

from analyst.mcp_tools import TrialTools
from pytest_backintel.analyst_api import AnalystConfig, AnalystLimits, AnalystTask
from pytest_backintel.run.analysts import load_analyst
from pytest_backintel.run.external.agent import external_analyst
from pytest_backintel.run.external.server import TrialServer
from pytest_backintel.run.trial import calibration_key
from pytest_backintel.scenario import Scenario

pytestmark = pytest.mark.benchmark

AGENT = Path(__file__).resolve().parents[1] / "agents" / "mcp_agent.py"
ROUNDS = 7
QUESTION = "How many orders are there? Report `n_orders` (orders)."
SQL = "SELECT COUNT(*) AS n_orders FROM orders"
ANSWER = {
    "status": "answered",
    "metrics": [{"name": "n_orders", "value": 5, "unit": "orders"}],
    "evidence": [{"id": "e1", "kind": "sql", "code": SQL, "metrics": ["n_orders"]}],
}
MINIMAL = f"import json\nprint(json.dumps({ANSWER!r}))\n"


def _median_s(samples: list[float]) -> float:
    return statistics.median(samples[1:])  # the first round warms caches


def test_external_agent_overhead(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    backend, store = orders_store(tmp_path / "shop", 5)
    folder = tmp_path / "agent"
    folder.mkdir()
    shutil.copy(AGENT, folder / AGENT.name)
    plan = {
        "mode": "reference",
        "questions": {QUESTION: {"sql": SQL, "units": {"n_orders": "orders"}}},
    }
    (folder / "plan.json").write_text(json.dumps(plan))
    limits = AnalystLimits(wall_time_s=60)

    def task() -> AnalystTask:
        return AnalystTask(QUESTION, store.connect, store.display_id, limits)

    direct: list[float] = []
    for _ in range(ROUNDS):
        tools = TrialTools(store.connect, None, max_tool_calls=60)
        server = TrialServer(tools, "bench", None).start()
        env = {
            **os.environ,
            "BACKINTEL_QUESTION": QUESTION,
            "BACKINTEL_MCP_URL": server.url,
            "BACKINTEL_MCP_TOKEN": server.token,
            "BACKINTEL_TRIAL": "bench",
        }
        started = time.perf_counter()
        subprocess.run([sys.executable, str(folder / AGENT.name)], env=env, check=True,
                       capture_output=True)  # fmt: skip
        direct.append(time.perf_counter() - started)
        assert tools.answers, "the agent did not answer"
        server.close()

    (folder / "minimal.py").write_text(MINIMAL)

    def through_cmd(script: str) -> list[float]:
        analyst = external_analyst(f"cmd:python {folder / script}", AnalystConfig(), cwd=tmp_path)
        times: list[float] = []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            run = analyst.answer(task())
            times.append(time.perf_counter() - started)
            assert run.output is not None, run.error
        analyst.close()
        return times

    external = through_cmd(AGENT.name)
    minimal_cmd = through_cmd("minimal.py")
    minimal_direct: list[float] = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, str(folder / "minimal.py")], check=True, capture_output=True
        )
        minimal_direct.append(time.perf_counter() - started)

    scenario = Scenario.model_validate(
        {
            "id": "bench-orders", "version": 1, "title": "Orders", "question": QUESTION,
            "dataset": {"world": "olist"}, "split": "development", "level": 1,
            "family": "bench", "answerable": True,
            "metrics": [{"name": "n_orders", "kind": "count", "unit": "orders"}],
            "check_sql": SQL,
        }
    )  # fmt: skip
    reference = load_analyst("reference", AnalystConfig())
    inproc: list[float] = []
    for _ in range(ROUNDS):
        t = task()
        t.calibration = calibration_key(scenario)
        started = time.perf_counter()
        run = reference.answer(t)
        inproc.append(time.perf_counter() - started)
        assert run.output is not None
    backend.teardown_session()

    d, e, i = _median_s(direct), _median_s(external), _median_s(inproc)
    md, mc = _median_s(minimal_direct), _median_s(minimal_cmd)
    with capsys.disabled():
        print(f"\nexternal agent overhead per trial ({ROUNDS - 1} rounds after a warm-up, median)")
        print(f"in-process reference analyst answer : {i * 1000:8.1f} ms")
        print(f"agent run directly (its own time)   : {d * 1000:8.1f} ms")
        print(f"agent through --analyst cmd: (bwrap): {e * 1000:8.1f} ms")
        print(f"external path's own cost            : {(e - d) * 1000:8.1f} ms")
        print(f"minimal agent run directly          : {md * 1000:8.1f} ms")
        print(f"minimal agent through --analyst cmd:: {mc * 1000:8.1f} ms")
        print(f"external path's fixed cost          : {(mc - md) * 1000:8.1f} ms")
