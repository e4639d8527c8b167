"""`--shard I/N`: a deterministic, balanced part of the planned trials for one machine.

Every shard process collects the same items (same checkout, same selection), so each computes
the same whole plan and the same split with nothing shared but the source data. Without
durations the trials are ordered by the sha256 of their item id and dealt round-robin: shard
sizes differ by at most one, and the split is the same on every machine and Python version
(no `hash()`, which is salted per process). With `--shard-durations RUN_DIR` each trial
weighs its scenario's mean recorded latency in that run (trials it never ran weigh the median
of the known ones) and goes, heaviest first, to the shard with the least work so far.

Each shard writes its own run folder; `parts/shard.json` (copied into `run.json` as `shard`)
holds the shard's index, the whole plan and its hash, which `backintel merge` checks.
"""

from __future__ import annotations

import hashlib
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from pytest_backintel.records.attempts import final_rows
from pytest_backintel.records.parts import SHARD_FILE, plan_hash
from pytest_backintel.records.writer import read_json_lines, read_records, write_json

__all__ = ["assign", "recorded_durations", "select_shard", "stable_key"]


def stable_key(nodeid: str) -> str:
    """The sha256 of the item id: the same on every machine and Python version."""
    return hashlib.sha256(nodeid.encode()).hexdigest()


def assign(
    trials: dict[str, str], total: int, durations: dict[str, float] | None = None
) -> dict[str, int]:
    """Shard (1..total) of each trial; `trials` maps item id to scenario id, `durations`
    scenario id to seconds (None: balance the counts)."""
    order = sorted(trials, key=stable_key)
    if not durations:
        return {nodeid: n % total + 1 for n, nodeid in enumerate(order)}
    default = statistics.median(durations.values())
    weight = {n: durations.get(trials[n], default) for n in order}
    load = [0.0] * total
    out: dict[str, int] = {}
    for nodeid in sorted(order, key=lambda n: -weight[n]):  # stable: ties keep hash order
        shard = min(range(total), key=lambda s: (load[s], s))
        load[shard] += weight[nodeid]
        out[nodeid] = shard + 1
    return out


def recorded_durations(run_dir: Path) -> dict[str, float]:
    """Mean recorded latency per scenario id in an earlier run (its part files, else its
    `records.jsonl`); a usage error when the folder holds no records."""
    parts = sorted((run_dir / "parts").glob("records-*.jsonl"))
    records = [r for part in parts for r, _ in final_rows(read_json_lines(part))]
    if not records and (run_dir / "records.jsonl").is_file():
        records = read_records(run_dir / "records.jsonl")
    seconds: dict[str, list[float]] = defaultdict(list)
    for record in records:
        if isinstance(record.get("latency_s"), int | float) and record.get("scenario_id"):
            seconds[str(record["scenario_id"])].append(float(record["latency_s"]))
    if not seconds:
        raise pytest.UsageError(
            f"--shard-durations {run_dir}: no trial records with a latency there "
            "(give the folder of an earlier run, results/<run-id>)"
        )
    return {case: statistics.fmean(values) for case, values in seconds.items()}


def select_shard(
    config: pytest.Config,
    items: list[pytest.Item],
    shard: tuple[int, int],
    durations_from: Path | None,
    run_dir: Path,
) -> dict[str, Any]:
    """Keep this shard's trials in `items` (others deselected; items that are not trials
    stay) and write `parts/shard.json`; returns what it wrote."""
    index, total = shard
    trials = {i.nodeid: i.scenario.id for i in items if hasattr(i, "scenario")}
    durations = recorded_durations(durations_from) if durations_from else None
    where = assign(trials, total, durations)
    kept = [i for i in items if where.get(i.nodeid, index) == index]
    dropped = [i for i in items if where.get(i.nodeid, index) != index]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    info = {
        "index": index,
        "total": total,
        "plan": sorted(trials),
        "plan_hash": plan_hash(list(trials)),
        "trials": sum(1 for n in where.values() if n == index),
        "balanced_by": f"durations recorded in {durations_from}" if durations else "sha256",
        "budgets": "per shard",
    }
    if trials and not config.option.collectonly:
        write_json(run_dir / "parts" / SHARD_FILE, info)
    return info
