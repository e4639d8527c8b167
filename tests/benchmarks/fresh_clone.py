"""The main job on a fresh clone of this release and of a previous one, in the same run.

Each release is cloned from this repository (`git clone --no-local`, so nothing is shared with
this checkout), checked out at its ref, set up with `uv sync --frozen` (uv's package cache is
the machine's own, so the sync is a warm one) and runs the README's main job,
`uv run pytest -m development`, as a newcomer does: SQLite, no model key, no `BACKINTEL_*`
variable, its data and results inside the clone, no bytecode compiled beforehand. The only
addition is `--durations=0 --durations-min=0`, which changes nothing but what pytest prints.

    nice -n 10 uv run python tests/benchmarks/fresh_clone.py [--previous REF] [--current REF]

Printed per release: the sync's time, the job's wall time, the peak memory of its process tree
(every process the job started, polled every 0.2 s from /proc: the sum of their resident sets,
which counts a page shared by forked children once per child, and the sum of their
proportional set sizes, which counts it once), the items
by outcome; then the ratio of the wall times (current / previous) and, per release, the time by
phase: each item's setup (where an item waits for the world it needs to be generated), call
(the analyst and the scoring) and teardown, summed by world and by family (from the run's
records). The previous release defaults to the current one's first parent.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from test_bench_latency import _tree_rss_kb

REPO = Path(__file__).resolve().parents[2]
JOB = ["uv", "run", "pytest", "-m", "development", "--durations=0", "--durations-min=0"]
DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S.*)$")
SUMMARY = re.compile(r"=+ (.*) in ([\d.]+)s")


@dataclass
class Job:
    """One release's run of the main job."""

    ref: str
    commit: str
    sync_s: float = 0.0
    wall_s: float = 0.0
    peak_mb: float = 0.0
    peak_pss_mb: float = 0.0
    exit_code: int = 0
    summary: str = ""
    phases: dict[str, dict[str, float]] = field(default_factory=dict)
    """Phase (setup, call, teardown) -> group ("world X", "family Y") -> seconds."""


def newcomer_env() -> dict[str, str]:
    """The environment without this project's or a provider's settings."""
    dropped = ("BACKINTEL_", "PYTEST_", "VIRTUAL_ENV", "UV_PROJECT", "PYTHONDONTWRITEBYTECODE")
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(dropped) and not k.endswith(("_API_KEY", "_TOKEN"))
    }


def _tree_pss_kb(root: int) -> int:
    """Proportional set size of `root` and its descendants, in KiB: each shared page counted
    once across the tree (a sum of RSS counts a fork server's pages again in every child)."""
    total = 0
    for pid in _tree_pids(root):
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        total += sum(int(ln.split()[1]) for ln in rollup.splitlines() if ln.startswith("Pss:"))
    return total


def _tree_pids(root: int) -> set[int]:
    parents: dict[int, list[int]] = defaultdict(list)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(stat[1])].append(int(entry.name))
    tree, frontier = {root}, [root]
    while frontier:
        children = [c for c in parents.get(frontier.pop(), []) if c not in tree]
        tree.update(children)
        frontier += children
    return tree


def run_polled(command: list[str], cwd: Path, log: Path) -> tuple[float, float, float, int]:
    """(wall s, peak summed RSS and peak PSS of the process tree in MB, exit code), output to
    `log`."""
    peak, peak_pss = 0, 0
    with log.open("w") as out:
        start = time.monotonic()
        process = subprocess.Popen(
            command, cwd=cwd, env=newcomer_env(), stdout=out, stderr=subprocess.STDOUT
        )
        done = threading.Event()

        def poll() -> None:
            nonlocal peak, peak_pss
            while not done.wait(0.2):
                peak = max(peak, _tree_rss_kb(process.pid))
                peak_pss = max(peak_pss, _tree_pss_kb(process.pid))

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        code = process.wait()
        wall = time.monotonic() - start
        done.set()
        poller.join()
    return wall, peak / 1024, peak_pss / 1024, code


def clone(ref: str, into: Path) -> str:
    """A fresh clone of this repository at `ref`; its commit."""
    commit = subprocess.check_output(["git", "rev-parse", ref], cwd=REPO, text=True).strip()
    subprocess.run(["git", "clone", "-q", "--no-local", str(REPO), str(into)], check=True)
    subprocess.run(["git", "checkout", "-q", "--detach", commit], cwd=into, check=True)
    return commit


def phases(log: Path, folder: Path) -> dict[str, dict[str, float]]:
    """Seconds by phase and by world / family, from pytest's durations and the run's records."""
    records = sorted((folder / "results").glob("*/records.jsonl"), key=lambda p: p.stat().st_mtime)
    groups: dict[str, tuple[str, str]] = {}
    for line in records[-1].read_text().splitlines() if records else []:
        record = json.loads(line)
        groups[record["nodeid"]] = (str(record.get("world")), str(record.get("family")))
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for line in log.read_text().splitlines():
        match = DURATION.match(line)
        if match is None:
            continue
        seconds, phase, nodeid = float(match[1]), match[2], match[3]
        world, family = groups.get(nodeid, ("?", "?"))
        totals[phase][f"world {world}"] += seconds
        totals[phase][f"family {family}"] += seconds
    return {phase: dict(by) for phase, by in totals.items()}


def measure(ref: str, folder: Path, select: str | None) -> Job:
    job = Job(ref, clone(ref, folder))
    start = time.monotonic()
    subprocess.run(["uv", "sync", "--frozen", "-q"], cwd=folder, env=newcomer_env(), check=True)
    job.sync_s = time.monotonic() - start
    log = folder / "job.log"
    job.wall_s, job.peak_mb, job.peak_pss_mb, job.exit_code = run_polled(
        JOB + (["-k", select] if select else []), folder, log
    )
    summaries = [m[1] for line in log.read_text().splitlines() if (m := SUMMARY.search(line))]
    job.summary = summaries[-1] if summaries else f"exit {job.exit_code}"
    job.phases = phases(log, folder)
    return job


def _seconds(job: Job, phase: str, group: str) -> float:
    return job.phases.get(phase, {}).get(group, 0.0)


def report(jobs: list[Job]) -> None:
    print(f"\n{'release':<22} {'sync s':>7} {'job s':>8} {'RSS MB':>8} {'PSS MB':>8}  items")
    for job in jobs:
        name = f"{job.ref} {job.commit[:7]}"
        memory = f"{job.peak_mb:>8.0f} {job.peak_pss_mb:>8.0f}"
        print(f"{name:<22} {job.sync_s:>7.1f} {job.wall_s:>8.1f} {memory}  {job.summary}")
    previous, current = jobs
    print(f"ratio (current / previous wall time): {current.wall_s / previous.wall_s:.2f}")
    groups = sorted(
        {g for job in jobs for by in job.phases.values() for g in by},
        key=lambda g: (g.startswith("family"), -sum(_seconds(j, "call", g) for j in jobs)),
    )
    print(f"\n{'seconds (setup / call)':<36}" + "".join(f"{j.commit[:7]:>20}" for j in jobs))
    for group in groups:
        cells = [
            f"{_seconds(j, 'setup', group):.1f} / {_seconds(j, 'call', group):.1f}" for j in jobs
        ]
        print(f"{group[:36]:<36}" + "".join(f"{c:>20}" for c in cells))
    for job in jobs:
        items = {
            p: sum(v for g, v in by.items() if g.startswith("world"))
            for p, by in job.phases.items()
        }
        rest = job.wall_s - sum(items.values())
        print(
            f"{job.commit[:7]}: items' "
            + ", ".join(f"{p} {s:.1f} s" for p, s in items.items())
            + f"; outside the items (start-up, collection, session end) {rest:.1f} s"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--previous", default=None, help="ref (default: the current's parent)")
    parser.add_argument("--current", default="HEAD", help="ref of this release (default HEAD)")
    parser.add_argument("--keep", action="store_true", help="keep the clones (paths printed)")
    parser.add_argument(
        "--select", default=None, help="a -k expression: part of the job (to try the script)"
    )
    args = parser.parse_args()
    previous = args.previous or f"{args.current}^"
    base = Path(tempfile.mkdtemp(prefix="backintel-fresh-"))
    try:
        jobs = []
        for name, ref in (("previous", previous), ("current", args.current)):
            print(f"{name}: {ref} in {base / name}", flush=True)
            jobs.append(measure(ref, base / name, args.select))
            print(f"  {jobs[-1].wall_s:.1f} s, peak {jobs[-1].peak_pss_mb:.0f} MB PSS", flush=True)
        report(jobs)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
