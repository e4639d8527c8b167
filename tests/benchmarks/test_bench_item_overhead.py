"""Per-item cost of the harness on a trivial task: the same scripted Pydantic AI agent run
200 times in a plain `agent.run_sync` loop, as 200 plain pytest tests, and as 200 BackIntel
items (store provisioning, fingerprints, the analyst, evidence re-execution on the store and
on two perturbed probes, scoring, records and traces).

The agent answers in one model request with the right value and its SQL evidence, so every
item passes. Two tasks: `l1-delivered-orders` of the shipped benchmark (a 3.7 MB SQLite copy
per item: copying, hashing and querying it is data work that grows with the store) and the
same question over a SQLite file of five rows built in a temporary project (what is left is
the harness's own cost). An item figure is the difference between a run of 220 trials and
one of 20, divided by 200: process start-up and collection cancel out. Nothing is asserted.
"""

from __future__ import annotations

import json
import os
import resource
import sqlite3
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

SHOP_SQL = "SELECT COUNT(*) AS delivered_orders FROM orders WHERE status = 'delivered'"
SHOP_SCENARIO = f"""id: delivered-orders
version: 1
title: Delivered orders
question: How many orders were delivered?
dataset: {{sqlite: ../shop.sqlite}}
split: development
level: 1
family: orders
answerable: true
metrics:
  - {{name: delivered_orders, kind: count, unit: orders}}
reference:
  sql: {SHOP_SQL}
"""

AGENT_MODULE = '''
"""A trivial scripted analyst: one model request that returns the final answer."""
import os

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from pytest_backintel.analyst_api import AnalystRun
from pytest_backintel.contract import AnalystAnswer

ANSWERS = {answers!r}


def _respond(messages, info):
    answer = ANSWERS[os.environ.get("BENCH_TASK", "olist")]
    return ModelResponse(parts=[ToolCallPart(tool_name=info.output_tools[0].name, args=answer)])


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

PLAIN_TESTS = """
import pytest

import trivialagent

AGENT = trivialagent.build_agent()


@pytest.mark.parametrize("n", range({samples}))
def test_sample(n):
    assert AGENT.run_sync("How many orders were delivered?").output.metrics
"""


def _answer(value: object, sql: str) -> dict[str, object]:
    return {
        "status": "answered",
        "metrics": [{"name": "delivered_orders", "value": value, "unit": "orders"}],
        "evidence": [{"id": "e1", "kind": "sql", "code": sql, "metrics": ["delivered_orders"]}],
        "method": "count of delivered orders",
        "caveats": [],
    }


def _answers() -> dict[str, dict[str, object]]:
    refs = json.loads((ROOT / "scenarios" / "references" / "olist.json").read_text())
    value = refs["references"]["l1-delivered-orders"]["values"]["delivered_orders"]
    return {"olist": _answer(value, EVIDENCE), "shop": _answer(4, SHOP_SQL)}


def _shop_project(folder: Path) -> Path:
    """A project of its own: five orders in `shop.sqlite`, one scenario, its locked reference."""
    folder.mkdir()
    con = sqlite3.connect(folder / "shop.sqlite")
    con.executescript(
        """
        CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL, amount NUMERIC);
        INSERT INTO orders VALUES (1, 'delivered', 19.9), (2, 'delivered', 5.1),
            (3, 'canceled', 42), (4, 'delivered', 100.25), (5, 'delivered', 0.75);
        """
    )
    con.commit()
    con.close()
    (folder / "scenarios").mkdir()
    (folder / "scenarios" / "delivered-orders.scenario.yaml").write_text(SHOP_SCENARIO)
    subprocess.run(
        [str(Path(sys.executable).parent / "backintel"), "references", "build"],
        cwd=folder, check=True, capture_output=True,
    )  # fmt: skip
    return folder / "scenarios"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _pytest_cost(tmp: Path, args: list[str], cwd: Path, task: str) -> tuple[float, float]:
    """Wall and CPU seconds of one pytest process."""
    env = {
        **os.environ,
        "PYTHONPATH": f"{tmp}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "BENCH_TASK": task,
    }
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", *args]
    start, cpu = time.perf_counter(), _children_cpu()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall, cpu = time.perf_counter() - start, _children_cpu() - cpu
    if done.returncode != 0:
        raise AssertionError(f"the benchmark run failed:\n{done.stdout[-3000:]}{done.stderr}")
    return wall, cpu


def _items_cost(tmp: Path, target: Path, cwd: Path, task: str) -> tuple[float, float]:
    """Wall and CPU milliseconds per BackIntel item: (220 trials - 20 trials) / 200."""

    def run(trials: int) -> tuple[float, float]:
        args = [str(target), "--analyst", "trivialagent:build", "--trials", str(trials)]
        args += ["--results-dir", str(tmp / "results"), "--run-id", f"t{time.time_ns()}"]
        return _pytest_cost(tmp, args, cwd, task)

    run(2)  # warm-up: builds the world, the probes' copies and the caches once
    many, few = run(20 + SAMPLES), run(20)
    return (many[0] - few[0]) * 1000, (many[1] - few[1]) * 1000


def test_item_overhead_against_the_plain_agent_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "trivialagent.py").write_text(AGENT_MODULE.format(answers=_answers()))
    sys.path.insert(0, str(tmp_path))
    try:
        import trivialagent  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
    agent = trivialagent.build_agent()
    question = "How many orders were delivered?"
    agent.run_sync(question)  # warm-up
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(SAMPLES):
        agent.run_sync(question)
    plain = ((time.perf_counter() - start) * 1000, (time.process_time() - cpu) * 1000)

    plain_tests = tmp_path / "plain"
    plain_tests.mkdir()
    (plain_tests / "test_plain.py").write_text(PLAIN_TESTS.format(samples=SAMPLES))
    (plain_tests / "test_few.py").write_text(PLAIN_TESTS.format(samples=0))
    many = _pytest_cost(tmp_path, ["test_plain.py"], plain_tests, "olist")
    few = _pytest_cost(tmp_path, ["test_few.py"], plain_tests, "olist")
    rows = [
        ("plain agent.run_sync loop", plain),
        ("plain pytest test", ((many[0] - few[0]) * 1000, (many[1] - few[1]) * 1000)),
        ("BackIntel item, own 5-row SQLite", _items_cost(
            tmp_path, _shop_project(tmp_path / "shop"), tmp_path / "shop", "shop"
        )),
        ("BackIntel item, Olist (3.7 MB)", _items_cost(tmp_path, SCENARIO, ROOT, "olist")),
    ]  # fmt: skip
    with capsys.disabled():  # the table is printed even without -s
        print(f"\nper-sample cost on a trivial task ({SAMPLES} samples, one model request each)")
        print(f"{'path':<34} {'wall ms':>8} {'ratio':>6} {'CPU ms':>8} {'ratio':>6}")
        for label, (wall, used) in rows:
            ratio_wall, ratio_cpu = wall / plain[0], used / plain[1]
            wall, used = wall / SAMPLES, used / SAMPLES
            print(f"{label:<34} {wall:>8.1f} {ratio_wall:>6.2f} {used:>8.1f} {ratio_cpu:>6.2f}")
