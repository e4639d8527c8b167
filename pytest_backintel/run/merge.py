"""`backintel merge OUT PART...`: shards (and resumed parts) of one run as one run folder.

Every part must be of the same whole plan (`--shard`'s recorded plan, else the part's own
plan), measured by the same analyst, model settings, method hash and harness, on the same
scenario files and data. A part that differs is refused, naming the part and the difference;
so is a trial recorded in two parts. Planned trials no part recorded are reported (the merged
run is still written, and `--resume OUT` finishes it). The merged folder holds what a
single-machine run's would: `run.json` (with `merged_from` naming the parts), `records.jsonl`
sorted by item id, `traces.jsonl`, cassettes, and the part files `--resume` reads; the parts
of a model matrix also give the merged matrix its folder per model and `matrix.json`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_backintel.records.attempts import final_rows, retried
from pytest_backintel.records.parts import plan_hash, read_shard
from pytest_backintel.records.writer import (
    now_iso,
    read_json,
    read_json_lines,
    read_records,
    write_json,
    write_json_lines,
)

__all__ = ["MergeRefused", "Merged", "Part", "load_part", "merge_runs", "register"]

LOCK = "freeze.lock.json"
PART_FIELDS = (
    "freeze",
    "shard",
    "resumed",
    "appended",
    "appended_to",
    "budget_spent",
    "freeze_check",
)
"""`run.json` fields that describe one part, kept per part under `merged_from`."""


class MergeRefused(Exception):
    """The parts cannot be one run; the message names the part and what differs."""


@dataclass(frozen=True)
class Part:
    """One part folder: its header, final records, shard and the whole plan it belongs to."""

    path: Path
    header: dict[str, Any]
    records: list[dict[str, Any]]
    shard: dict[str, Any] | None
    plan: list[str]

    @property
    def order(self) -> tuple[int, str]:
        return (int(self.shard["index"]) if self.shard else 0, str(self.path))


def load_part(path: Path) -> Part:
    """Read a part folder (its part files, else its `records.jsonl`)."""
    from pytest_backintel.run.resume import read_json_list  # pytest: only when merging

    header = read_json(path / "run.json")
    if not header:
        raise MergeRefused(f"{path}: not a run folder (no readable run.json)")
    files = sorted((path / "parts").glob("records-*.jsonl"))
    if files:
        rows = final_rows([row for f in files for row in read_json_lines(f)])
        records = [record for record, _ in rows]
    else:
        records = read_records(path / "records.jsonl") if (path / "records.jsonl").is_file() else []
    shard = read_shard(path)
    own = sorted({str(n) for f in (path / "parts").glob("plan-*.json") for n in read_json_list(f)})
    plan = [str(n) for n in shard["plan"]] if shard else own or header.get("planned_items") or []
    return Part(path, header, records, shard, sorted(plan))


def _value(header: dict[str, Any], keys: tuple[str, ...]) -> Any:
    value: Any = header
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def check_parts(parts: list[Part]) -> None:
    """Raise `MergeRefused` naming each part that is not of the run most parts are of (the
    plan most parts share; on a tie, the first part's)."""
    from pytest_backintel.run.resume import IDENTITY

    plans = Counter(tuple(p.plan) for p in parts)
    first = next(p for p in parts if plans[tuple(p.plan)] == max(plans.values()))
    problems = []
    shas: dict[str, tuple[str, Path]] = {}
    data: dict[tuple[str, str], tuple[str, Path]] = {}
    for part in parts:
        if part.plan != first.plan:
            extra, gone = set(part.plan) - set(first.plan), set(first.plan) - set(part.plan)
            problems.append(
                f"{part.path} is of another plan (plan hash {plan_hash(part.plan)[:12]}, "
                f"{first.path} has {plan_hash(first.plan)[:12]}: {len(extra)} item(s) only in "
                f"it, {len(gone)} missing from it)"
            )
        for keys in IDENTITY:
            if _value(part.header, keys) != _value(first.header, keys):
                problems.append(
                    f"{part.path}: {'.'.join(keys)} is {_value(part.header, keys)!r}, "
                    f"{first.path} has {_value(first.header, keys)!r}"
                )
        if _lock_of(part) != _lock_of(first):
            problems.append(
                f"{part.path}: frozen under candidate {_lock_of(part)[0]}, {first.path} under "
                f"{_lock_of(first)[0]} (None: not frozen)"
            )
        if part.shard and first.shard and part.shard["total"] != first.shard["total"]:
            problems.append(
                f"{part.path}: shard of {part.shard['total']}, not {first.shard['total']}"
            )
        for r in part.records:
            case, sha = str(r.get("scenario_id")), str(r.get("scenario_sha"))
            seen = shas.setdefault(case, (sha, part.path))
            if seen[0] != sha:
                problems.append(
                    f"{part.path}: scenario {case} has sha {sha[:12]}, {seen[1]} has {seen[0][:12]}"
                )
            if r.get("data_hash"):
                key, digest = (str(r.get("world")), str(r.get("snapshot"))), str(r["data_hash"])
                was = data.setdefault(key, (digest, part.path))
                if was[0] != digest:
                    problems.append(
                        f"{part.path}: data of world {key[0]!r} ({key[1]}) has hash "
                        f"{digest[:12]}, {was[1]} has {was[0][:12]}"
                    )
    if problems:
        unique = list(dict.fromkeys(problems))
        raise MergeRefused("refusing to merge parts of different runs: " + "; ".join(unique))


def _lock_of(part: Part) -> tuple[str | None, list[str]]:
    """The candidate and plan of a part's freeze lock ((None, []) for a run not frozen)."""
    lock = read_json(part.path / LOCK)
    return lock.get("candidate_id"), sorted(lock.get("plan_items") or [])


@dataclass(frozen=True)
class Merged:
    out: Path
    records: int
    missing: list[str]


def _merged_header(out: Path, parts: list[Part], records: list[dict[str, Any]]) -> dict[str, Any]:
    from pytest_backintel.records.run_folder import records_summary

    base = {k: v for k, v in parts[0].header.items() if k not in PART_FIELDS}
    return (
        base
        | records_summary(records)
        | {
            "run_id": out.name,
            "started_at": min(str(p.header.get("started_at", "")) for p in parts),
            "finished_at": max(str(p.header.get("finished_at", "")) for p in parts),
            "exit_status": max(int(p.header.get("exit_status") or 0) for p in parts),
            "planned_items": parts[0].plan,
            "retried": retried(records),
            "merged_at": now_iso(),
            "merged_from": [
                {"run_id": p.header.get("run_id"), "path": str(p.path), "trials": len(p.records)}
                | {k: p.header[k] for k in (*PART_FIELDS, "freeze", "git", "args") if k in p.header}
                for p in parts
            ],
        }
    )


def merge_runs(out: Path, paths: list[Path]) -> Merged:
    """Check the parts, then write the merged run folder `out` (which must be new or empty)."""
    if not paths:
        raise MergeRefused("give the part folders to merge")
    if out.exists() and any(out.iterdir()):
        raise MergeRefused(f"{out} already exists and is not empty: merge into a new folder")
    parts = sorted((load_part(p) for p in paths), key=lambda p: p.order)
    check_parts(parts)
    owner: dict[str, Path] = {}
    doubled = []
    for part in parts:
        for nodeid in {str(r.get("nodeid")) for r in part.records}:
            if nodeid in owner:
                doubled.append(f"{nodeid} ({owner[nodeid]} and {part.path})")
            owner.setdefault(nodeid, part.path)
    if doubled:
        raise MergeRefused(
            f"{len(doubled)} trial(s) recorded in more than one part: {', '.join(sorted(doubled))}"
        )
    records = [
        r | {"run_id": out.name, "part_run_id": r.get("run_id")} for p in parts for r in p.records
    ]
    records.sort(key=lambda r: (str(r.get("nodeid", "")), int(r.get("trial", 0))))
    lines = [json.dumps(r, sort_keys=True, default=str) for r in records]
    (out / "parts").mkdir(parents=True, exist_ok=True)
    write_json_lines(out / "records.jsonl", lines)
    write_json_lines(out / "parts" / "records-merged.jsonl", lines)
    (out / "parts" / "plan-merged.json").write_text(json.dumps(parts[0].plan))
    spans = _copy_traces_and_cassettes(out, parts)
    if (parts[0].path / LOCK).is_file():  # every part has the same lock: a frozen run's
        shutil.copy(parts[0].path / LOCK, out / LOCK)
    header = _merged_header(out, parts, records) | {"spans": spans}
    write_json(out / "run.json", header)
    from pytest_backintel.records.matrix_folder import is_matrix, write_matrix  # numpy: here

    if is_matrix(header):  # each model's run folder and the leaderboard, from every part
        for slug in header["matrix"]["folders"].values():
            for part in parts:  # a recorded matrix keeps each model's cassettes in its folder
                if (part.path / slug / "cassettes").is_dir():
                    shutil.copytree(
                        part.path / slug / "cassettes", out / slug / "cassettes", dirs_exist_ok=True
                    )
        write_matrix(out, header, records)
    missing = sorted(set(parts[0].plan) - set(owner))
    return Merged(out, len(records), missing)


def _copy_traces_and_cassettes(out: Path, parts: list[Part]) -> int | None:
    lines = [
        line
        for p in parts
        if (p.path / "traces.jsonl").is_file()
        for _, line in read_json_lines(p.path / "traces.jsonl")
    ]
    for part in parts:
        if (part.path / "cassettes").is_dir():
            shutil.copytree(part.path / "cassettes", out / "cassettes", dirs_exist_ok=True)
    if not lines:
        return None
    write_json_lines(out / "traces.jsonl", lines)
    return len(lines)


def _merge_command(args: argparse.Namespace) -> int:
    try:
        merged = merge_runs(Path(args.out), [Path(p) for p in args.parts])
    except MergeRefused as exc:
        print(f"backintel merge: {exc}", file=sys.stderr)
        return 2
    print(f"merged {len(args.parts)} part(s): {merged.records} trial record(s) in {merged.out}")
    if merged.missing:
        shown = ", ".join(merged.missing[:20])
        more = f" and {len(merged.missing) - 20} more" if len(merged.missing) > 20 else ""
        print(
            f"backintel merge: {len(merged.missing)} planned trial(s) have no record in any "
            f"part: {shown}{more}; finish them with `pytest ... --resume {merged.out.name} "
            f"--results-dir {merged.out.parent}`",
            file=sys.stderr,
        )
        return 1
    return 0


def register(subparsers: Any) -> None:
    """Add `merge` to the `backintel` subcommands."""
    p = subparsers.add_parser(
        "merge", help="merge the part folders of one run (shards, resumed parts) into OUT"
    )
    p.add_argument("out", help="the merged run folder to write (results/<run-id>)")
    p.add_argument("parts", nargs="+", help="the part folders (results/<part-run-id>)")
    p.set_defaults(func=_merge_command)
