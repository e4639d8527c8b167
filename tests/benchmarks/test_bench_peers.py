"""BackIntel beside pydantic-evals and inspect-ai on the same slow-model job: 40 samples x 4
requests against the in-repo test server (`BACKINTEL_BENCH_LATENCY` seconds a request, default
1), 16 requests in flight (`--concurrency 40 --max-connections 16` for BackIntel,
`max_concurrency=16` for pydantic-evals, `peers/pydantic_evals_run.py`; `max_connections=16`,
`max_samples=40` for inspect-ai, `peers/inspect_ai_run.py`), alternating,
`BACKINTEL_BENCH_ROUNDS` rounds.

Printed per harness (medians): wall time, seconds to the first model request as the server
saw it, and the CPU the process had used by then (from /proc: start-up work, not the
machine's load). Nothing asserted. pydantic-evals is not a dependency of this project: point
`BACKINTEL_PEER_PYTHON` at a Python that has it (the same pydantic-ai and OpenAI SDK
versions), with its bytecode compiled:

    uv venv /tmp/peer && VIRTUAL_ENV=/tmp/peer uv pip install pydantic-evals==2.62.0 \\
        "pydantic-ai-slim[openai]==2.62.0" openai==3.57.0
    /tmp/peer/bin/python -m compileall -q /tmp/peer/lib
    BACKINTEL_BENCHMARKS=1 BACKINTEL_PEER_PYTHON=/tmp/peer/bin/python \\
        uv run pytest tests/benchmarks -k peers -p no:xdist -s

inspect-ai, in a venv of its own (`BACKINTEL_PEER_INSPECT_PYTHON`; its provider speaks Chat
Completions to the same server over real HTTP through the OpenAI SDK):

    uv venv /tmp/peer-inspect && VIRTUAL_ENV=/tmp/peer-inspect uv pip install \\
        --compile-bytecode inspect-ai==0.3.285 openai==3.63.0
    BACKINTEL_PEER_INSPECT_PYTHON=/tmp/peer-inspect/bin/python BACKINTEL_BENCHMARKS=1 \\
        BACKINTEL_PEER_PYTHON=/tmp/peer/bin/python \\
        uv run pytest tests/benchmarks -k peers -p no:xdist -s

BackIntel runs in this project's environment ("backintel, dev venv": the test-only pytest
plugins, hypothesis, syrupy, pytest-benchmark, load too) and, when `BACKINTEL_BENCH_PYTHON`
names one, also in an environment with its runtime dependencies only, as a user installs it
("backintel, runtime venv"; this checkout installed editable, so it runs the same code):

    uv export --frozen --no-dev --no-emit-project --no-hashes -o /tmp/runtime.txt
    uv venv /tmp/runtime && VIRTUAL_ENV=/tmp/runtime uv pip install --compile-bytecode \\
        -r /tmp/runtime.txt && VIRTUAL_ENV=/tmp/runtime uv pip install --no-deps -e .
    BACKINTEL_BENCH_PYTHON=/tmp/runtime/bin/python BACKINTEL_BENCHMARKS=1 \\
        BACKINTEL_PEER_PYTHON=/tmp/peer/bin/python \\
        uv run pytest tests/benchmarks -k peers -p no:xdist -s

With `BACKINTEL_BENCH_FIRST_ONLY=1` each process is killed as the server sees its first request
(what a killed BackIntel run left is removed before the next): only the CPU column means
anything then, and a round takes seconds, so more rounds fit (`BACKINTEL_BENCH_ROUNDS`).
`BACKINTEL_BENCH_BEFORE` names a folder holding another tree of this project (the code before
a change, e.g. `git archive main | tar -x -C /tmp/before`): BackIntel runs from it too, with
the runtime venv's Python (`python -m pytest` imports the plugin from the folder it runs in),
as "backintel before, runtime venv".

Before the measured rounds each BackIntel environment runs the job once, unmeasured, with
`PYTHONDONTWRITEBYTECODE` unset, so pytest's assertion-rewritten copies of the plugin's
modules are cached as on any machine that does not set it (where the variable is set, every
process would otherwise rewrite them again; pydantic-evals' bytecode is compiled above).
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

from pytest_backintel.run.cleanup import remove_folder
from pytest_backintel.testing.model_server import ModelServer

pytestmark = pytest.mark.benchmark

PEER = os.environ.get("BACKINTEL_PEER_PYTHON", "")
INSPECT = os.environ.get("BACKINTEL_PEER_INSPECT_PYTHON", "")
RUNTIME = os.environ.get("BACKINTEL_BENCH_PYTHON", "")
ROUNDS = int(os.environ.get("BACKINTEL_BENCH_ROUNDS", "3"))
FIRST_ONLY = os.environ.get("BACKINTEL_BENCH_FIRST_ONLY") == "1"
BEFORE = os.environ.get("BACKINTEL_BENCH_BEFORE", "")
TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _run(
    server: ModelServer, command: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT
) -> tuple[float, float, float, str]:
    """(wall s, first request s, CPU s at the first request, last output line)."""
    seen = len(server.requests)
    start = time.time()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, text=True, env=env)
    cpu = float("nan")

    def mine() -> list[float]:  # not a killed predecessor's request still in flight
        return [r.received_at for r in server.requests[seen:] if r.received_at >= start]

    while process.poll() is None and not mine():
        time.sleep(0.002)
    if process.poll() is None:
        cpu = _cpu_s(process.pid)
        if FIRST_ONLY:
            process.kill()
    out, _ = process.communicate()
    if FIRST_ONLY:  # its store copies and sandbox folder; then its requests in flight settle
        for folder in [
            *cwd.glob(f"data/stores/*/{process.pid}"),
            cwd / "data/sandbox" / str(process.pid),
        ]:
            remove_folder(folder)
        time.sleep(0.3)
    wall = time.time() - start
    first = min(mine(), default=start) - start
    return wall, first, cpu, (out.strip().splitlines() or [f"exit {process.returncode}"])[-1]


@pytest.mark.skipif(not PEER, reason="set BACKINTEL_PEER_PYTHON to a Python with pydantic-evals")
def test_beside_pydantic_evals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refs = json.loads((ROOT / "scenarios" / "references" / "olist.json").read_text())
    value = refs["references"]["l1-delivered-orders"]["values"]["delivered_orders"]
    pythons = {"backintel, dev venv": (sys.executable, ROOT)}
    if RUNTIME:
        pythons["backintel, runtime venv"] = (RUNTIME, ROOT)
    if BEFORE:
        pythons["backintel before, runtime venv"] = (RUNTIME or sys.executable, Path(BEFORE))
    peers = {
        "pydantic-evals": [PEER, str(Path(__file__).parent / "peers" / "pydantic_evals_run.py")]
    }
    if INSPECT:
        peers["inspect-ai"] = [INSPECT, str(Path(__file__).parent / "peers" / "inspect_ai_run.py")]
    rows: dict[str, list[tuple[float, float, float, str]]] = {name: [] for name in peers}
    rows |= {name: [] for name in pythons}
    with ModelServer() as server:
        _script(server, value)

        def ours(python: str, folder: str) -> list[str]:
            args = [python, "-m", "pytest", str(SCENARIO.relative_to(ROOT)), "-q", "-p", "no:xdist"]
            args += ["--model", "openai:bench", "--model-base-url", server.url]
            args += ["--trials", "40", "--concurrency", "40", "--max-connections", "16"]
            return [*args, f"--results-dir={tmp_path / folder}"]

        caching = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        for python, cwd in pythons.values():  # unmeasured: pytest caches rewritten modules
            _run(server, ours(python, "warm-up"), env=caching, cwd=cwd)
        for n in range(ROUNDS):
            for name, peer in peers.items():
                rows[name].append(_run(server, [*peer, server.url, "16"]))
            for name, (python, cwd) in pythons.items():
                rows[name].append(_run(server, ours(python, f"{n}-{len(rows[name])}"), cwd=cwd))
    with capsys.disabled():
        print(f"\n40 samples x 4 requests, {LATENCY_S:g} s a request, 16 in flight; medians")
        print(f"{'harness':<24} {'wall s':>7} {'1st req s':>9} {'CPU at 1st s':>12}  last line")
        for name, runs in rows.items():
            wall, first, cpu = (statistics.median(r[i] for r in runs) for i in range(3))
            print(f"{name:<24} {wall:>7.2f} {first:>9.2f} {cpu:>12.2f}  {runs[-1][3]}")
        cpus = [f"{name} {min(r[2] for r in runs):.2f}" for name, runs in rows.items()]
        print("CPU at the 1st request, least of the rounds: " + ", ".join(cpus))
