"""Per-item cost of the harness on a trivial task: the same scripted Pydantic AI agent run
200 times in a plain `agent.run_sync` loop, and as 200 BackIntel items (store provisioning,
fingerprints, the analyst, evidence re-execution, scoring, records and traces).

The agent answers `l1-delivered-orders` in one model request with the right value and its SQL
evidence, so every item passes. The item figure is the difference between a run of 220 trials
and one of 20, divided by 200: process start-up and collection cancel out. Nothing is asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.benchmark

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = 200
SCENARIO = ROOT / "scenarios" / "definitions" / "level1" / "l1-delivered-orders.scenario.yaml"
EVIDENCE = "SELECT COUNT(*) AS delivered_orders FROM orders WHERE order_status = 'delivered'"

AGENT_MODULE = '''
"""A trivial scripted analyst: one model request that returns the final answer."""
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from pytest_backintel.analyst_api import AnalystRun
from pytest_backintel.contract import AnalystAnswer

ANSWER = {answer!r}


def _respond(messages, info):
    tool = info.output_tools[0].name
    return ModelResponse(parts=[ToolCallPart(tool_name=tool, args=ANSWER)])


def build_agent():
    return Agent(FunctionModel(_respond), output_type=AnalystAnswer)


class Trivial:
    name = "trivial"
    kind = "custom"

    def __init__(self):
        self.agent = build_agent()

    def answer(self, task):
        return AnalystRun(output=self.agent.run_sync(task.question).output)


def build(config):
    return Trivial()
'''


def _answer() -> dict[str, object]:
    refs = json.loads((ROOT / "scenarios" / "references" / "olist.json").read_text())
    value = refs["references"]["l1-delivered-orders"]["values"]["delivered_orders"]
    return {
        "status": "answered",
        "metrics": [{"name": "delivered_orders", "value": value, "unit": "orders"}],
        "evidence": [
            {"id": "e1", "kind": "sql", "code": EVIDENCE, "metrics": ["delivered_orders"]}
        ],
        "method": "count of delivered orders",
        "caveats": [],
    }


def _items_wall(tmp: Path, trials: int) -> float:
    env = {**os.environ, "PYTHONPATH": f"{tmp}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = [
        *(sys.executable, "-m", "pytest", str(SCENARIO), "-q", "-p", "no:xdist"),
        *("--analyst", "trivialagent:build", "--trials", str(trials)),
        *("--results-dir", str(tmp / "results"), "--run-id", f"t{trials}-{time.time_ns()}"),
    ]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise AssertionError(f"the benchmark run failed:\n{done.stdout[-3000:]}{done.stderr}")
    return wall


def test_item_overhead_against_the_plain_agent_loop(tmp_path: Path) -> None:
    (tmp_path / "trivialagent.py").write_text(AGENT_MODULE.format(answer=_answer()))
    sys.path.insert(0, str(tmp_path))
    try:
        import trivialagent  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
    agent = trivialagent.build_agent()
    question = "How many orders have the status delivered?"
    agent.run_sync(question)  # warm-up
    start = time.perf_counter()
    for _ in range(SAMPLES):
        agent.run_sync(question)
    plain_ms = (time.perf_counter() - start) / SAMPLES * 1000
    _items_wall(tmp_path, 2)  # warm-up: builds the world once
    item_ms = (_items_wall(tmp_path, 20 + SAMPLES) - _items_wall(tmp_path, 20)) / SAMPLES * 1000
    print(f"\nper-sample cost on a trivial task ({SAMPLES} samples, one model request each)")
    print(f"{'path':<36} {'ms/sample':>10} {'ratio':>7}")
    print(f"{'plain agent.run_sync loop':<36} {plain_ms:>10.1f} {1.0:>7.2f}")
    print(f"{'BackIntel item (serial)':<36} {item_ms:>10.1f} {item_ms / plain_ms:>7.2f}")
