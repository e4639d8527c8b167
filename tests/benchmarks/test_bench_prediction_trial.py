"""The harness's share of a prediction trial (issue 39, item 2): the 8 development prediction
scenarios (`pytest -m "development and prediction"`) run twice in the same session, each
Python evidence re-run (on the source, on the label-permuted copy and on the shuffled-features
copy) in a fresh sandbox (`BACKINTEL_ZYGOTE=0`, the path before) and forked from the zygote.

Per trial: its span (the `backintel trial` span's `duration_s` in traces.jsonl), the
analyst's own time (`latency_s`: its requests and its own `run_python`), and the harness's
time, the rest. Printed: per
scenario and in total, harness ÷ analyst before and after. The target is after ≤ 1.0. Nothing
is asserted but that every trial passed (a ratio of failing trials would mean nothing).

    BACKINTEL_BENCHMARKS=1 uv run pytest -p no:xdist -s \\
        tests/benchmarks/test_bench_prediction_trial.py
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


def _run(results: Path, run_id: str, zygote: bool) -> tuple[dict[str, tuple[float, float]], float]:
    """scenario id -> (trial span, analyst's own time) of one run; and its wall time."""
    env = {**os.environ, "BACKINTEL_ZYGOTE": "1" if zygote else "0"}
    cmd = [sys.executable, "-m", "pytest", "-m", "development and prediction", "-p", "no:xdist"]
    cmd += ["-q", "--results-dir", str(results), "--run-id", run_id]
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    folder = results / run_id
    latency = {}
    for line in (folder / "records.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert record["outcome"] == "pass", record
        latency[record["scenario_id"]] = float(record["latency_s"])
    spans = {}
    for line in (folder / "traces.jsonl").read_text().splitlines():
        trace = json.loads(line)
        name = str(trace.get("name", ""))
        if trace.get("parent") is None and name.startswith("backintel trial "):
            spans[name.removeprefix("backintel trial ").partition("/")[0]] = trace["duration_s"]
    assert len(latency) == 8, latency
    assert spans.keys() == latency.keys(), (latency, spans)
    return {s: (spans[s], latency[s]) for s in sorted(latency)}, wall


def _ratios(trials: dict[str, tuple[float, float]]) -> dict[str, float]:
    return {s: (span - own) / own for s, (span, own) in trials.items()}


def test_harness_time_per_prediction_trial(tmp_path: Path) -> None:
    before, wall_before = _run(tmp_path, "fresh", zygote=False)
    after, wall_after = _run(tmp_path, "zygote", zygote=True)
    rb, ra = _ratios(before), _ratios(after)
    print("\nharness time per prediction trial / the analyst's own time")
    print(f"{'scenario':<24}{'before':>9}{'after':>9}   (span s, analyst s: before | after)")
    for s in before:
        (sb, ob), (sa, oa) = before[s], after[s]
        print(f"{s:<24}{rb[s]:>9.2f}{ra[s]:>9.2f}   {sb:.1f}, {ob:.1f} | {sa:.1f}, {oa:.1f}")
    for label, trials, wall in (("before", before, wall_before), ("after", after, wall_after)):
        harness = sum(span - own for span, own in trials.values())
        own = sum(own for _, own in trials.values())
        print(
            f"{label}: harness {harness:.1f} s / analyst {own:.1f} s = {harness / own:.2f} "
            f"(the 8 items: {wall:.0f} s)"
        )
