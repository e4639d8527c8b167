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
import resource
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


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _items_cost(tmp: Path, trials: int) -> tuple[float, float]:
    """Wall and CPU seconds of one pytest process running `trials` items."""
    env = {**os.environ, "PYTHONPATH": f"{tmp}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = [
        *(sys.executable, "-m", "pytest", str(SCENARIO), "-q", "-p", "no:xdist"),
        *("--analyst", "trivialagent:build", "--trials", str(trials)),
        *("--results-dir", str(tmp / "results"), "--run-id", f"t{trials}-{time.time_ns()}"),
    ]
    start, cpu = time.perf_counter(), _children_cpu()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall, cpu = time.perf_counter() - start, _children_cpu() - cpu
    if done.returncode != 0:
        raise AssertionError(f"the benchmark run failed:\n{done.stdout[-3000:]}{done.stderr}")
    return wall, cpu


def test_item_overhead_against_the_plain_agent_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "trivialagent.py").write_text(AGENT_MODULE.format(answer=_answer()))
    sys.path.insert(0, str(tmp_path))
    try:
        import trivialagent  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
    agent = trivialagent.build_agent()
    question = "How many orders have the status delivered?"
    agent.run_sync(question)  # warm-up
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(SAMPLES):
        agent.run_sync(question)
    plain = ((time.perf_counter() - start) * 1000, (time.process_time() - cpu) * 1000)
    _items_cost(tmp_path, 2)  # warm-up: builds the world once
    many, few = _items_cost(tmp_path, 20 + SAMPLES), _items_cost(tmp_path, 20)
    item = ((many[0] - few[0]) * 1000, (many[1] - few[1]) * 1000)
    with capsys.disabled():  # the table is printed even without -s
        print(f"\nper-sample cost on a trivial task ({SAMPLES} samples, one model request each)")
        print(f"{'path':<28} {'wall ms':>8} {'ratio':>6} {'CPU ms':>8} {'ratio':>6}")
        for label, (wall, used) in (("plain agent.run_sync loop", plain), ("BackIntel item", item)):
            wall, used = wall / SAMPLES, used / SAMPLES
            ratio_wall, ratio_cpu = wall * SAMPLES / plain[0], used * SAMPLES / plain[1]
            print(f"{label:<28} {wall:>8.1f} {ratio_wall:>6.2f} {used:>8.1f} {ratio_cpu:>6.2f}")
