"""Collection of the shipped suite: `pytest --collect-only -m development` from the repository
root, as a user types it, in a fresh process each round (the first round warms file caches).

Printed: the median wall time of the whole process and pytest's own "collected in" figure, with
the machine's bytecode setting as it is and with bytecode caching allowed. Nothing is asserted.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.benchmark

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 5
COMMAND = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "development"]


def _collect(env: dict[str, str]) -> tuple[float, float, str]:
    start = time.perf_counter()
    done = subprocess.run(COMMAND, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]
    found = re.search(r"in ([0-9.]+)s", last)
    return wall, float(found.group(1)) if found else float("nan"), last


def test_collection_time(capsys: pytest.CaptureFixture[str]) -> None:
    rows = []
    for label, bytecode in (("as set here", None), ("bytecode cached", "")):
        env = dict(os.environ)
        if bytecode is not None:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
        _collect(env)  # warm-up round
        runs = [_collect(env) for _ in range(ROUNDS)]
        walls, inner = [r[0] for r in runs], [r[1] for r in runs]
        rows.append((label, statistics.median(walls), statistics.median(inner), runs[-1][2]))
    with capsys.disabled():  # the table is printed even without -s
        print("\ncollection of the shipped suite (`pytest --collect-only -m development`)")
        print(f"{'PYTHONDONTWRITEBYTECODE':<24} {'wall s':>8} {'collect s':>10}  last line")
        for label, wall, inner, last in rows:
            print(f"{label:<24} {wall:>8.2f} {inner:>10.2f}  {last}")
