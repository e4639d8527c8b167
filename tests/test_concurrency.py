"""`--concurrency`: trials run ahead in one process, yet every item reports as in a serial run.

The analyst here waits a different time per question (so trials finish out of order) and then
answers every question with the same count: it passes `l1-delivered-orders` and fails the
others in their various ways, which is what the comparison with a serial run needs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_backintel.collect.loading import DEFINITIONS_DIR, find_scenarios
from pytest_backintel.run.pipeline import TrialPipeline
from pytest_backintel.run.world_builds import Ahead, WorldBuilds
from pytest_backintel.testing.model_server import ModelServer, Step

ROOT = Path(__file__).resolve().parents[1]
SLOW_ANALYST = """
import hashlib, os, threading, time

from pytest_backintel.analyst_api import AnalystRun
from pytest_backintel.contract import AnalystAnswer

SQL = "SELECT COUNT(*) AS delivered_orders FROM orders WHERE order_status = 'delivered'"
ANSWER = AnalystAnswer.model_validate({
    "status": "answered",
    "metrics": [{"name": "delivered_orders", "value": 3715, "unit": "orders"}],
    "evidence": [{"id": "e1", "kind": "sql", "code": SQL, "metrics": ["delivered_orders"]}],
})
IN_FLIGHT = [0, 0]  # now, most
LOCK = threading.Lock()


class Slow:
    name = "slow"
    kind = "custom"

    def answer(self, task):
        with open(os.environ["SLOW_ANALYST_CALLS"], "a") as calls:  # one line per trial run
            calls.write(task.question[:40].replace("\\n", " ") + "\\n")
        with LOCK:
            IN_FLIGHT[0] += 1
            IN_FLIGHT[1] = max(IN_FLIGHT)
            print(f"in flight: {IN_FLIGHT[1]}", flush=True)
            with open(f"{os.environ['SLOW_ANALYST_CALLS']}.{os.getpid()}.most", "w") as most:
                most.write(str(IN_FLIGHT[1]))
        delay = int(hashlib.sha256(task.question.encode()).hexdigest(), 16) % 5 * 0.1
        time.sleep(0.2 + delay)
        with task.connect() as session:
            session.run_sql(SQL)
        with LOCK:
            IN_FLIGHT[0] -= 1
        return AnalystRun(output=ANSWER)


def build(config):
    return Slow()
"""

SELECTION = "development and (level1 or level2) and not unanswerable"


def run(pytester: pytest.Pytester, run_id: str, *args: str) -> tuple[pytest.RunResult, Path]:
    results = pytester.path / "results"
    outcome = pytester.runpytest_subprocess(
        str(DEFINITIONS_DIR),
        *("-m", SELECTION, "-p", "no:cacheprovider", "--analyst", "slowanalyst:build"),
        *("--results-dir", str(results), "--run-id", run_id, "--junitxml", f"{run_id}.xml"),
        "-s",
        *args,
    )
    return outcome, results / run_id


def calls(project: pytest.Pytester) -> int:
    """How many trials the analyst ran (across processes), then start counting again."""
    path = project.path / "calls.txt"
    count = len(path.read_text().splitlines()) if path.exists() else 0
    path.unlink(missing_ok=True)
    return count


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]


def comparable(record: dict) -> dict:
    """A record without what differs between any two runs (times, ids, store names)."""
    volatile = {"run_id", "recorded_at", "trace_id", "latency_s", "store", "worker"}
    same = {k: v for k, v in record.items() if k not in volatile}
    if same.get("evidence_budget"):  # the time re-execution took
        same["evidence_budget"] = {**same["evidence_budget"], "spent_s": None}
    same["evidence"] = [  # how long each probe run took
        {**e, "probes": [{**p, "seconds": None} for p in e.get("probes") or []]}
        for e in same.get("evidence") or []
    ]
    return same


def junit_order(path: Path) -> list[tuple[str, str]]:
    cases = ET.parse(path).getroot().iter("testcase")
    return [
        (c.get("name", ""), "failure" if c.find("failure") is not None else "ok") for c in cases
    ]


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    (pytester.path / "slowanalyst.py").write_text(SLOW_ANALYST)
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    monkeypatch.setenv("SLOW_ANALYST_CALLS", str(pytester.path / "calls.txt"))
    return pytester


def test_concurrent_trials_report_exactly_as_a_serial_run(project: pytest.Pytester) -> None:
    serial, serial_dir = run(project, "serial", "--concurrency", "1", "-p", "no:xdist")
    serial_calls = calls(project)
    concurrent, concurrent_dir = run(project, "concurrent", "--concurrency", "8", "-p", "no:xdist")
    serial_records, concurrent_records = records(serial_dir), records(concurrent_dir)
    assert serial_calls == calls(project) == len(serial_records), "each trial ran exactly once"
    assert len(serial_records) >= 20
    assert [comparable(r) for r in concurrent_records] == [comparable(r) for r in serial_records]
    outcomes = {r["outcome"] for r in serial_records}
    assert "pass" in outcomes, "the comparison needs passes"
    assert len(outcomes) >= 2, "and failures"
    assert junit_order(project.path / "concurrent.xml") == junit_order(project.path / "serial.xml")
    assert serial.parseoutcomes() == concurrent.parseoutcomes()
    concurrent.stdout.no_fnmatch_line("*in flight: 9*")
    serial.stdout.no_fnmatch_line("*in flight: 2*")
    concurrent.stdout.fnmatch_lines(["*in flight: 8*"])


def test_concurrency_per_xdist_worker(project: pytest.Pytester) -> None:
    serial, serial_dir = run(project, "serial", "--concurrency", "1", "-p", "no:xdist")
    calls(project)
    spread, spread_dir = run(project, "spread", "--concurrency", "4", "-n", "2")
    by_node = {r["nodeid"]: comparable(r) for r in records(serial_dir)}
    spread_records = records(spread_dir)
    assert calls(project) == len(spread_records), "no trial ran twice, on either worker"
    assert {r["nodeid"]: comparable(r) | {"worker": None} for r in spread_records} == {
        k: v | {"worker": None} for k, v in by_node.items()
    }
    assert {r["worker"] for r in spread_records} == {"gw0", "gw1"}
    counts = serial.parseoutcomes()
    spread.assert_outcomes(passed=counts["passed"], failed=counts["failed"])
    # each worker was kept 4 items ahead (xdist alone keeps 2 pending once items take 0.1 s)
    most = [int(p.read_text()) for p in project.path.glob("calls.txt.*.most")]
    assert sorted(most) == [1, 4, 4], most  # the serial run's, then gw0's and gw1's


def test_a_stopped_run_cleans_up_the_trials_it_started_ahead(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = project.path / "own-data"  # a data folder no other test provisions stores in
    monkeypatch.setenv("BACKINTEL_DATA_DIR", str(data))
    result, run_dir = run(project, "stopped", "--concurrency", "8", "-p", "no:xdist", "-x")
    assert result.parseoutcomes().get("failed") == 1
    assert len(records(run_dir)) < 20
    stores = data / "stores"
    assert stores.is_dir()
    assert not [p for p in stores.rglob("bi_*") if p.exists()]


def test_the_pipeline_keeps_n_in_flight_and_hands_each_result_over_once() -> None:
    lock, now, most = threading.Lock(), [0], [0]

    def prepare(key: int) -> int:
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.02 * (key % 3))
        with lock:
            now[0] -= 1
        if key == 5:
            raise RuntimeError("store failed")
        return key * 10

    pipeline: TrialPipeline[int, int] = TrialPipeline(3, prepare)
    keys = list(range(12))
    taken = []
    for n, key in enumerate(keys):
        pipeline.ensure_started(keys[n:])
        prepared = pipeline.take(key)
        taken.append(prepared.result if prepared.error is None else str(prepared.error))
    pipeline.close()
    assert taken == [k * 10 if k != 5 else "store failed" for k in keys]
    assert most[0] == 3
    assert pipeline.pending() == []
    with pytest.raises(ValueError, match="at least 1"):
        TrialPipeline(0, prepare)


def _until(check: Callable[[], bool]) -> None:
    """Wait (up to 10 s) for `check`, which other threads make true."""
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_the_pipeline_passes_over_a_trial_that_would_wait_and_tops_up_as_trials_end() -> None:
    """Trial 0's world is being built elsewhere: the lanes go to 1 and 2, and as trials end
    the pipeline starts the next ones itself, 0 first once its world is built; `lanes()`
    bounds how many run (fewer while a world is built ahead)."""
    building, started, lanes = threading.Event(), [], [2]
    release = {key: threading.Event() for key in range(6)}
    building.set()

    def prepare(key: int) -> int:
        started.append(key)
        release[key].wait(10)
        return key

    pipeline: TrialPipeline[int, int] = TrialPipeline(
        2, prepare, lambda key: key == 0 and building.is_set(), lambda: lanes[0]
    )
    pipeline.ensure_started(range(6))
    _until(lambda: sorted(started) == [1, 2])
    release[1].set()
    _until(lambda: len(started) == 3)
    assert started[2] == 3
    building.clear()
    lanes[0] = 1
    release[2].set()
    release[3].set()
    _until(lambda: len(started) == 4)
    assert started[3] == 0
    time.sleep(0.05)
    assert len(started) == 4, "one lane: the next waits for trial 0 to end"
    for event in release.values():
        event.set()
    assert [pipeline.take(key).result for key in range(6)] == list(range(6))
    pipeline.close()
    assert sorted(started) == list(range(6))


def test_world_builds_say_what_is_under_way_and_when_the_background_thread_works() -> None:
    builds: WorldBuilds[str, int] = WorldBuilds()
    changes: list[bool] = []
    builds.on_change.append(lambda: changes.append(builds.under_way("tpch")))
    gate, seen = threading.Event(), []

    def build() -> int:
        seen.append((builds.under_way("tpch"), builds.working_ahead()))
        gate.wait(10)
        return 1

    thread = builds.prefetch([Ahead("tpch", build, "world tpch")])
    _until(lambda: bool(seen))
    assert seen == [(True, True)]
    gate.set()
    thread.join(10)
    assert (builds.under_way("tpch"), builds.working_ahead()) == (False, False)
    assert changes[0] is True
    assert changes[-1] is False
    assert builds.get("tpch", lambda: 2) == 1


SERVER_CASES = ("l1-delivered-orders", "l1-canceled-orders-2018")


def test_twenty_items_at_concurrency_8_against_the_test_server(
    model_server: ModelServer, tmp_path: Path
) -> None:
    """The real provider path: 2 cases x 10 trials, every request answered after 0.2 s; one
    case is answered right and one wrong, so the runs hold passes and `wrong_value`s."""
    refs = json.loads((ROOT / "scenarios" / "references" / "olist.json").read_text())
    scenarios = find_scenarios()
    for case, off_by in zip(SERVER_CASES, (0, 1), strict=True):
        scenario = scenarios[case][1]
        (metric,) = scenario.metrics
        value = refs["references"][case]["values"][metric.name] + off_by
        code = {"id": "e1", "kind": "sql", "code": scenario.check_sql, "metrics": [metric.name]}
        model_server.script(
            f"`{metric.name}`",
            [
                Step.call("list_tables", delay_s=0.2),
                Step.call("run_sql", {"sql": scenario.check_sql}, delay_s=0.2),
                Step.answer([{"name": metric.name, "value": value, "unit": metric.unit}], [code],
                            delay_s=0.2),
            ],
        )  # fmt: skip

    def bench(run_id: str, concurrency: str) -> tuple[subprocess.CompletedProcess[str], Path]:
        files = [str(scenarios[c][0]) for c in SERVER_CASES]
        command = [sys.executable, "-m", "pytest", *files, "-p", "no:xdist", "--trials", "10"]
        command += ["--model", "openai:bench", "--model-base-url", model_server.url]
        command += [f"--results-dir={tmp_path}", "--run-id", run_id, "--concurrency", concurrency]
        command += [f"--junitxml={tmp_path / run_id}.xml"]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        return done, tmp_path / run_id

    serial, serial_dir = bench("serial", "1")
    concurrent, concurrent_dir = bench("concurrent", "8")
    assert concurrent.returncode == serial.returncode == 1, "the wrong answers fail their items"
    serial_records, concurrent_records = records(serial_dir), records(concurrent_dir)
    assert len(serial_records) == 20, serial.stdout[-2000:]
    for a, b in zip(serial_records, concurrent_records, strict=True):
        a, b = comparable(a), comparable(b)
        assert {k for k in a if a[k] != b.get(k)} <= {"messages"}, (a, b)
    assert {r["outcome"] for r in serial_records} == {"pass", "wrong_value"}
    assert all(r["usage"]["requests"] == 3 for r in concurrent_records)
    order = junit_order(tmp_path / "concurrent.xml")
    assert order == junit_order(tmp_path / "serial.xml")
    assert len(order) == 20
    assert len(model_server.requests) == 2 * 20 * 3, "each trial's 3 requests, once each"
