"""Slow models: 40 samples x 4 requests against the in-repo OpenAI-compatible test server, each
request answered after `BACKINTEL_BENCH_LATENCY` seconds (default 1), through the real
provider path (`--model openai:… --model-base-url …`), at several concurrencies in one process
and with xdist workers, and with all 40 trials in flight sharing 16 connections
(`--max-connections 16`).

Printed per setting: wall time (from starting pytest to its exit), ideal time (samples x
requests x latency / concurrency), their ratio, the floor of that ratio (trials are whole: 40
trials of 4 requests in 16 slots take three rounds, 12 s; 160 requests on 16 connections take
ten), when the first model request arrived, how long the process ran after the last answer,
and the peak memory of the whole process tree (sampled from /proc). Nothing asserted.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pytest_backintel.testing.model_server import ModelServer, Step

pytestmark = pytest.mark.benchmark

ROOT = Path(__file__).resolve().parents[2]
SAMPLES, REQUESTS = 40, 4
LATENCY_S = float(os.environ.get("BACKINTEL_BENCH_LATENCY", "1.0"))
SCENARIO = ROOT / "scenarios" / "definitions" / "level1" / "l1-delivered-orders.scenario.yaml"
SQL = "SELECT COUNT(*) AS delivered_orders FROM orders WHERE order_status = 'delivered'"
SETTINGS = [  # (label, pytest arguments, requests in flight at once, slots hold whole trials)
    ("one process, concurrency 1", ["-p", "no:xdist", "--concurrency", "1"], 1, True),
    ("one process, concurrency 4", ["-p", "no:xdist", "--concurrency", "4"], 4, True),
    ("one process, concurrency 8", ["-p", "no:xdist", "--concurrency", "8"], 8, True),
    ("one process, concurrency 16", ["-p", "no:xdist", "--concurrency", "16"], 16, True),
    (
        "one process, 16 connections",
        ["-p", "no:xdist", "--concurrency", str(SAMPLES), "--max-connections", "16"],
        16,
        False,
    ),
    ("-n 4 workers, concurrency 1", ["-n", "4", "--concurrency", "1"], 4, True),
    ("-n 2 workers, concurrency 8", ["-n", "2", "--concurrency", "8"], 16, True),
]


def _script(server: ModelServer, value: int) -> None:
    evidence = {"id": "e1", "kind": "sql", "code": SQL, "metrics": ["delivered_orders"]}
    metric = {"name": "delivered_orders", "value": value, "unit": "orders"}
    server.script(
        "`delivered_orders`",
        [
            Step.call("list_tables", delay_s=LATENCY_S),
            Step.call("describe_table", {"name": "orders"}, delay_s=LATENCY_S),
            Step.call("run_sql", {"sql": SQL}, delay_s=LATENCY_S),
            Step.answer([metric], [evidence], delay_s=LATENCY_S),
        ],
    )


def _tree_rss_kb(root: int) -> int:
    """Resident memory of `root` and all its descendants, in KiB."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        parents[int(entry.name)] = int(fields.get("PPid", "0"))
        rss[int(entry.name)] = int(fields.get("VmRSS", "0 kB").split()[0])
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        children = [c for c, p in parents.items() if p == pid and c not in tree]
        tree.update(children)
        frontier += children
    return sum(rss.get(pid, 0) for pid in tree)


def _run(
    server: ModelServer, results: Path, args: list[str]
) -> tuple[float, int, str, float, float]:
    command = [
        *(sys.executable, "-m", "pytest", str(SCENARIO)),
        *("--model", "openai:bench", "--model-base-url", server.url, "-q"),
        *("--trials", str(SAMPLES), f"--results-dir={results}", *args),
    ]
    start, started_at = time.perf_counter(), time.time()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            peak[0] = max(peak[0], _tree_rss_kb(process.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = process.communicate()
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    last = out.strip().splitlines()[-1] if out.strip() else f"exit {process.returncode}"
    mine = [r for r in server.requests if r.received_at >= started_at]
    first = min((r.received_at for r in mine), default=started_at) - started_at
    answered = max((r.answered_at or 0.0 for r in mine), default=started_at) - started_at
    return wall, peak[0] // 1024, last, first, wall - answered


def test_latency_bound_runs_against_the_test_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refs = json.loads((ROOT / "scenarios" / "references" / "olist.json").read_text())
    value = refs["references"]["l1-delivered-orders"]["values"]["delivered_orders"]
    rows = []
    with ModelServer() as server:
        _script(server, value)
        for label, args, in_flight, whole in SETTINGS:
            run = _run(server, tmp_path / label.replace(" ", "_"), args)
            rounds = math.ceil(SAMPLES / in_flight) * REQUESTS if whole else None
            rounds = rounds or math.ceil(SAMPLES * REQUESTS / in_flight)
            rows.append((label, SAMPLES * REQUESTS * LATENCY_S / in_flight, rounds, *run))
    with capsys.disabled():  # the table is printed even without -s
        print(f"\n{SAMPLES} samples x {REQUESTS} requests, {LATENCY_S:g} s per request")
        print(
            f"{'setting':<30} {'wall s':>7} {'ideal s':>8} {'ratio':>6} {'floor':>6} "
            f"{'1st req s':>9} {'tail s':>7} {'peak MB':>8}  result"
        )
        for label, ideal, rounds, wall, peak_mb, last, first, tail in rows:
            floor = rounds * LATENCY_S  # whole rounds of trials, or of requests
            print(
                f"{label:<30} {wall:>7.1f} {ideal:>8.1f} {wall / ideal:>6.2f} "
                f"{floor / ideal:>6.2f} {first:>9.1f} {tail:>7.1f} {peak_mb:>8}  {last}"
            )
