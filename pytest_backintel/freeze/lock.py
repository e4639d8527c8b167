"""Frozen acceptance runs: a clean candidate, a declared plan, every trial kept.

`--freeze` records the candidate (git SHA of a clean tree, method hash, analyst, model and
limits, harness version), refuses a partial reserved suite, writes `freeze.lock.json` with the
trial plan before any item runs, and appends the run to `results/frozen-runs.jsonl`. A second
frozen run of the same candidate needs `--freeze-plan "why"`, and is recorded beside the first,
never in its place.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from pytest_backintel.collect.items import ScenarioItem
from pytest_backintel.collect.manifests import unseal_items
from pytest_backintel.freeze.allowlist import AllowlistError, check_worker_diff
from pytest_backintel.records.writer import now_iso, write_json
from pytest_backintel.scenario import Split

__all__ = [
    "FreezeError",
    "candidate_id",
    "check_candidate",
    "lock_plan",
    "plan_items",
    "register_run",
]


LOCK = "freeze.lock.json"


class FreezeError(Exception):
    """A frozen run cannot start as asked; the message says what to do."""


def candidate_id(candidate: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(candidate, sort_keys=True).encode()).hexdigest()[:16]


def check_candidate(
    git: dict[str, Any], root: Path, results_dir: Path, baseline: str | None = None
) -> dict[str, Any]:
    """A committed, clean candidate whose diff against the frozen baseline stays inside the
    worker allowlist (`pytest_backintel.freeze.allowlist`); returns what the diff check saw."""
    if git.get("sha") is None:
        raise FreezeError(
            "--freeze needs a git checkout: the candidate is identified by its commit"
        )
    if git.get("dirty"):
        raise FreezeError(
            "--freeze needs a clean work tree: commit the candidate first "
            "(`git status` lists the changes)"
        )
    try:
        return check_worker_diff(root, results_dir, baseline)
    except AllowlistError as exc:
        raise FreezeError(f"--freeze: {exc}") from exc


def registry_path(results_dir: Path) -> Path:
    return results_dir / "frozen-runs.jsonl"


def register_run(
    results_dir: Path,
    run_id: str,
    candidate: dict[str, Any],
    plan_reason: str | None,
    worker_diff: dict[str, Any] | None = None,
    shard: str | None = None,
) -> dict[str, Any]:
    """Append this frozen run to the registry; a repeat of a candidate needs a declared plan.
    Another shard (`I/N`, same N, another I) of the candidate is a part of its run, not a
    repeat; the same shard again is."""
    cid = candidate_id(candidate)
    path = registry_path(results_dir)
    earlier = []
    if path.exists():
        earlier = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    previous = [  # a run refused before its plan was locked never ran: it does not count
        e["run_id"]
        for e in earlier
        if e.get("candidate_id") == cid
        and (results_dir / e["run_id"] / LOCK).exists()
        and not _sibling_shards(e.get("shard"), shard)
    ]
    if previous and not plan_reason:
        raise FreezeError(
            f"candidate {cid} already has frozen run(s) {', '.join(previous)}; a further frozen "
            'run needs a declared plan: --freeze-plan "why this run, how many trials". '
            "Every run is kept; none replaces another."
        )
    entry = {
        "run_id": run_id,
        "candidate_id": cid,
        "candidate": candidate,
        "started_at": now_iso(),
        "plan": plan_reason,
        "repeat_of": previous,
        "worker_diff": worker_diff,
        "shard": shard,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry, sort_keys=True) + "\n")
    return entry


def _sibling_shards(earlier: object, shard: str | None) -> bool:
    """Whether two `I/N` shard specs are different parts of the same N."""
    if not (isinstance(earlier, str) and shard):
        return False
    (i, n), (j, m) = earlier.split("/"), shard.split("/")
    return n == m and i != j


def plan_items(
    run_dir: Path,
    entry: dict[str, Any],
    selected: Iterable[tuple[str, str, str]],
    all_reserved: dict[str, set[str]],
    manifests: Iterable[Path],
    sealed: list[dict[str, Any]] | None = None,
) -> None:
    """Check the reserved selection is whole suites, then write the lock with the trial plan.

    `selected` holds (suite, case id, nodeid) of the selected reserved items; `all_reserved`
    every reserved case id collected per suite.
    """
    chosen: dict[str, set[str]] = {}
    nodeids = []
    for suite, case, nodeid in selected:
        chosen.setdefault(suite, set()).add(case)
        nodeids.append(nodeid)
    for suite, cases in sorted(chosen.items()):
        missing = sorted(all_reserved.get(suite, set()) - cases)
        if missing:
            raise FreezeError(
                f"a frozen run takes the reserved suite {suite!r} whole; the "
                f"selection leaves out {len(missing)} case(s): {', '.join(missing)}"
            )
    lock = entry | {
        "plan_items": sorted(nodeids),
        "manifests": {
            str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(set(manifests))
        },
        "manifests_hash_method": "sha256-file-bytes",  # what `verify_lock` recomputes
        "sealed": sealed or [],
        "locked_at": now_iso(),
    }
    path = run_dir / LOCK
    if not path.exists():
        write_json(path, lock)


def lock_plan(
    run_dir: Path,
    entry: dict[str, Any],
    items: list[pytest.Item],
    all_reserved: dict[str, set[str]],
    data_dir: Path,
) -> None:
    """A frozen run's collection: unseal sealed suites (swapping in their real items), then
    check whole suites and write the lock with the plan and the verified commitments."""
    sealed = unseal_items(items, data_dir)
    scenario_items = [i for i in items if isinstance(i, ScenarioItem)]
    selected = [
        (i.suite, i.scenario.id, i.nodeid)
        for i in scenario_items
        if i.scenario.split is Split.RESERVED
    ]
    manifests = [i.manifest for i in scenario_items if i.manifest is not None]
    manifests += [Path(r["commitment_file"]) for r in sealed]
    plan_items(run_dir, entry, selected, all_reserved, manifests, sealed)


def verify_lock(run_dir: Path) -> dict[str, Any] | None:
    """After a frozen run: did every manifest keep the checksum it had when the plan was locked?"""
    path = run_dir / LOCK
    if not path.exists():
        return None
    lock = json.loads(path.read_text())
    changed = [
        name
        for name, digest in lock.get("manifests", {}).items()
        if not Path(name).exists() or hashlib.sha256(Path(name).read_bytes()).hexdigest() != digest
    ]
    return {
        "lock": str(path),
        "manifests_unchanged": not changed,
        "changed": changed,
        "planned_items": len(lock.get("plan_items", [])),
    }
