"""`--resume RUN_ID` and `--retry-blocked RUN_ID`: finish a run in its own folder.

A resumed session runs exactly the planned trials of the run that have no record (and, with
`--retry-blocked`, those whose final outcome was blocked: `provider_error`, `infra_error`,
`not_run`), appending to the same part files. It is refused, with the difference named, when
the analyst, the model settings, the method hash, the plan, a scenario file or a dataset
differs from what the run measured; a frozen run resumes only under its own freeze lock.
Each resumption is listed in `run.json` under `resumed`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_backintel.records.attempts import BLOCKED_OUTCOMES, attempt_fields, final_rows
from pytest_backintel.records.parts import read_shard
from pytest_backintel.records.writer import now_iso, read_json, read_json_lines, read_records

__all__ = [
    "IDENTITY",
    "Resumption",
    "check_resumed",
    "read_json_list",
]

IDENTITY: tuple[tuple[str, ...], ...] = (
    ("analyst", "spec"),
    ("analyst", "kind"),
    ("model",),
    ("matrix", "models"),
    ("model_base_url",),
    ("model_api",),
    ("store_backend",),
    ("sandbox", "backend"),
    ("trials",),
    ("limits",),
    ("record",),
    ("method_hash",),
    ("harness_version",),
)
"""The `run.json` fields a resumed session must share with the run it finishes."""


def _field(header: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = header
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _names(nodeids: set[str], limit: int = 5) -> str:
    shown = sorted(nodeids)[:limit]
    return ", ".join(shown) + (f" and {len(nodeids) - limit} more" if len(nodeids) > limit else "")


class Resumption:
    """What earlier sessions of the run left: its header, plan, shard and final records."""

    def __init__(self, run_dir: Path, retry_blocked: bool) -> None:
        self.run_dir, self.retry_blocked = run_dir, retry_blocked
        self.flag = "--retry-blocked" if retry_blocked else "--resume"
        self.header = read_json(run_dir / "run.json")
        if not self.header:
            raise pytest.UsageError(
                f"{self.flag} {run_dir.name}: no run folder {run_dir} with a run.json "
                "(give the run id of a run under --results-dir)"
            )
        parts = sorted((run_dir / "parts").glob("plan-*.json"))
        plan = {str(n) for p in parts for n in read_json_list(p)}
        if not plan:
            raise pytest.UsageError(
                f"{self.flag} {run_dir.name}: the run has no plan (parts/plan-*.json): "
                "it never started a trial, so there is nothing to finish; start it again"
            )
        self.plan = plan
        self.shard = read_shard(run_dir)
        self.records = self._final_records()
        self.by_node: dict[str, list[dict[str, Any]]] = {}
        for record in self.records:
            self.by_node.setdefault(str(record.get("nodeid")), []).append(record)

    def _final_records(self) -> list[dict[str, Any]]:
        parts = sorted((self.run_dir / "parts").glob("records-*.jsonl"))
        if not parts and (self.run_dir / "records.jsonl").is_file():
            return read_records(self.run_dir / "records.jsonl")
        return [r for r, _ in final_rows([row for p in parts for row in read_json_lines(p)])]

    # -- before collection (the controller) ------------------------------------------------
    def begin(
        self, header: dict[str, Any], shard: tuple[int, int] | None, frozen: bool, candidate: str
    ) -> None:
        """Check the session measures what the run did, then add its `resumption` entry."""
        self.check_header(header, shard)
        self.check_freeze(frozen, candidate)
        header["resumption"] = self.entry()

    def check_header(self, started: dict[str, Any], shard: tuple[int, int] | None) -> None:
        """Refuse a session whose analyst, model settings or method differ from the run's."""
        differ = [
            f"{'.'.join(path)} was {_field(self.header, path)!r}, now {_field(started, path)!r}"
            for path in IDENTITY
            if _field(self.header, path) != _field(started, path)
        ]
        recorded = (self.shard["index"], self.shard["total"]) if self.shard else None
        if shard is not None and shard != recorded:
            was = f"{recorded[0]}/{recorded[1]}" if recorded else "none"
            differ.append(f"shard was {was}, now {shard[0]}/{shard[1]}")
        if differ:
            raise pytest.UsageError(
                f"{self.flag} {self.run_dir.name}: this session would measure something else "
                f"than the run: {'; '.join(differ)}. Resume with the run's own settings "
                f"(run.json), or start a new run"
            )

    def check_freeze(self, frozen: bool, candidate: str) -> None:
        """A frozen run resumes only with `--freeze` and the same candidate (its lock)."""
        lock = read_json(self.run_dir / "freeze.lock.json")
        if lock and not frozen:
            raise pytest.UsageError(
                f"{self.flag} {self.run_dir.name}: the run is frozen (freeze.lock.json): "
                "resume it with --freeze, under the same lock"
            )
        if frozen and not lock:
            raise pytest.UsageError(
                f"{self.flag} {self.run_dir.name} --freeze: the run was not frozen "
                "(no freeze.lock.json); resume it without --freeze"
            )
        if lock and lock.get("candidate_id") != candidate:
            raise pytest.UsageError(
                f"{self.flag} {self.run_dir.name}: the freeze lock is for candidate "
                f"{lock.get('candidate_id')}, this session is candidate {candidate} "
                "(commit, method, analyst, model or limits differ)"
            )

    def entry(self) -> dict[str, Any]:
        """The `run.json` `resumed` entry as the session starts."""
        blocked = sum(1 for r in self.records if r.get("outcome") in BLOCKED_OUTCOMES)
        return {
            "at": now_iso(),
            "mode": "retry_blocked" if self.retry_blocked else "resume",
            "records_before": len(self.records),
            "missing_before": len(self.plan - set(self.by_node)),
            "blocked_before": blocked,
        }

    # -- after collection (every process) --------------------------------------------------
    def select(
        self,
        config: pytest.Config,
        items: list[pytest.Item],
        data_hash: Callable[[Any], tuple[str, str, str]],
    ) -> str:
        """Check the collection is the run's plan, its scenarios and data unchanged, then keep
        only the trials to run; `data_hash(item)` is the item's (world, snapshot, hash).
        Returns the line saying how many will run."""
        trials: list[Any] = [i for i in items if hasattr(i, "scenario")]
        whole = set(self.shard["plan"]) if self.shard else self.plan
        collected = {i.nodeid for i in trials}
        problems = []
        if added := collected - whole:
            problems.append(f"{len(added)} item(s) not in the run's plan: {_names(added)}")
        if gone := whole - collected:
            problems.append(f"{len(gone)} planned item(s) not collected: {_names(gone)}")
        shas = {str(r["scenario_id"]): r.get("scenario_sha") for r in self.records}
        data = {(r.get("world"), r.get("snapshot")): r.get("data_hash") for r in self.records}
        todo = [i for i in trials if i.nodeid in self.plan and self._runs(i.nodeid)]
        for item in {i.scenario.id: i for i in todo}.values():
            sha = shas.get(item.scenario.id)
            if sha is not None and sha != item.scenario_sha:
                problems.append(
                    f"scenario {item.scenario.id} changed since the run "
                    f"(sha {str(sha)[:12]}, now {item.scenario_sha[:12]})"
                )
        worlds = {(i.scenario.dataset.world, i.scenario.dataset.snapshot): i for i in todo}
        for item in worlds.values():
            world, snapshot, digest = data_hash(item)
            if data.get((world, snapshot)) not in (None, digest):
                problems.append(
                    f"data of world {world!r} ({snapshot}) changed since the run "
                    f"(hash {str(data[(world, snapshot)])[:12]}, now {str(digest)[:12]})"
                )
        if problems:
            raise pytest.UsageError(
                f"{self.flag} {self.run_dir.name}: refused, the run cannot be finished as "
                f"planned: {'; '.join(problems)}"
            )
        keep = {i.nodeid for i in todo}
        dropped = [i for i in items if hasattr(i, "scenario") and i.nodeid not in keep]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [i for i in items if not hasattr(i, "scenario") or i.nodeid in keep]
        again = sum(1 for n in keep if n in self.by_node)
        return (
            f"backintel: {self.flag} {self.run_dir.name}: {len(keep)} of {len(self.plan)} planned "
            f"trial(s) to run ({again} blocked, run again)"
            if keep
            else f"backintel: {self.flag} {self.run_dir.name}: nothing to run, every planned "
            "trial has a final record"
        )

    def _runs(self, nodeid: str) -> bool:
        earlier = self.by_node.get(nodeid)
        if not earlier:
            return True
        return self.retry_blocked and earlier[-1].get("outcome") in BLOCKED_OUTCOMES

    def attempt(self, nodeid: str) -> dict[str, Any]:
        """`attempt` and `attempts` for the record of a trial run again ({} for a first run)."""
        earlier = self.by_node.get(nodeid)
        return attempt_fields(earlier) if earlier else {}


def read_json_list(path: Path) -> list[Any]:
    """A JSON list from `path` ([] when unreadable)."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return value if isinstance(value, list) else []


def check_resumed(config: pytest.Config) -> None:
    """A usage error for `--resume` with `--retry-blocked`, or either with `--run-id` or
    `--append-run` (the run appends to its own folder)."""
    resume, retry = config.getoption("--resume"), config.getoption("--retry-blocked")
    if resume and retry:
        raise pytest.UsageError("give --resume or --retry-blocked, not both")
    run = resume or retry
    run_id, append = config.getoption("--run-id"), config.getoption("--append-run")
    if run and ((run_id and run_id != run) or append):
        which = "--resume" if resume else "--retry-blocked"
        raise pytest.UsageError(
            f"{which} {run} appends to that run's own folder: leave out --run-id and --append-run"
        )
