"""BackIntel beside pydantic-evals on the same slow-model job: 40 samples x 4 requests against
the in-repo test server (`BACKINTEL_BENCH_LATENCY` seconds a request, default 1), 16 requests
in flight (`--concurrency 40 --max-connections 16` for BackIntel, `max_concurrency=16` for
pydantic-evals, `peers/pydantic_evals_run.py`), alternating, `BACKINTEL_BENCH_ROUNDS` rounds.

Printed per run: wall time, seconds to the first model request as the server saw it, and the
CPU the process had used by then (from /proc: start-up work, not the machine's load). Nothing
asserted. pydantic-evals is not a dependency of this project: point `BACKINTEL_PEER_PYTHON`
at a Python that has it (the same pydantic-ai version), with its bytecode compiled:

    uv venv /tmp/peer && VIRTUAL_ENV=/tmp/peer uv pip install pydantic-evals==2.62.0
    /tmp/peer/bin/python -m compileall -q /tmp/peer/lib
    BACKINTEL_BENCHMARKS=1 BACKINTEL_PEER_PYTHON=/tmp/peer/bin/python \\
        uv run pytest tests/benchmarks -k peers -p no:xdist -s
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_bench_latency import LATENCY_S, ROOT, SCENARIO, _script

from pytest_backintel.testing.model_server import ModelServer

pytestmark = pytest.mark.benchmark

PEER = os.environ.get("BACKINTEL_PEER_PYTHON", "")
ROUNDS = int(os.environ.get("BACKINTEL_BENCH_ROUNDS", "3"))
TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _run(server: ModelServer, command: list[str]) -> tuple[float, float, float, str]:
    """(wall s, first request s, CPU s at the first request, last output line)."""
    seen = len(server.requests)
    start = time.time()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    cpu = float("nan")
    while process.poll() is None and len(server.requests) == seen:
        time.sleep(0.002)
    if process.poll() is None:
        cpu = _cpu_s(process.pid)
    out, _ = process.communicate()
    wall = time.time() - start
    first = min((r.received_at for r in server.requests[seen:]), default=start) - start
    return wall, first, cpu, (out.strip().splitlines() or [f"exit {process.returncode}"])[-1]


@pytest.mark.skipif(not PEER, reason="set BACKINTEL_PEER_PYTHON to a Python with pydantic-evals")
def test_beside_pydantic_evals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refs = json.loads((ROOT / "scenarios" / "references" / "olist.json").read_text())
    value = refs["references"]["l1-delivered-orders"]["values"]["delivered_orders"]
    rows: dict[str, list[tuple[float, float, float, str]]] = {"pydantic-evals": [], "backintel": []}
    with ModelServer() as server:
        _script(server, value)
        for n in range(ROUNDS):
            peer = [PEER, str(Path(__file__).parent / "peers" / "pydantic_evals_run.py")]
            rows["pydantic-evals"].append(_run(server, [*peer, server.url, "16"]))
            ours = [sys.executable, "-m", "pytest", str(SCENARIO), "-q", "-p", "no:xdist"]
            ours += ["--model", "openai:bench", "--model-base-url", server.url, "--trials", "40"]
            ours += ["--concurrency", "40", "--max-connections", "16"]
            rows["backintel"].append(_run(server, [*ours, f"--results-dir={tmp_path / str(n)}"]))
    with capsys.disabled():
        print(f"\n40 samples x 4 requests, {LATENCY_S:g} s a request, 16 in flight; medians")
        print(f"{'harness':<16} {'wall s':>7} {'1st req s':>9} {'CPU at 1st s':>12}  last line")
        for name, runs in rows.items():
            wall, first, cpu = (statistics.median(r[i] for r in runs) for i in range(3))
            print(f"{name:<16} {wall:>7.2f} {first:>9.2f} {cpu:>12.2f}  {runs[-1][3]}")
