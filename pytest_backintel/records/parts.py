"""What a run folder says about the run it is part of: the shard it holds
(`parts/shard.json`, copied into `run.json` as `shard`) and the sessions that resumed it
(`run.json` `resumed`). Written by `run.shards` and `run.resume`, read by the run folder's
final header and by `backintel merge`."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from pytest_backintel.records.attempts import retried
from pytest_backintel.records.writer import read_json

__all__ = ["SHARD_FILE", "plan_hash", "read_shard", "record_resumption"]

SHARD_FILE = "shard.json"
"""Written under `parts/` by every process of a shard (the same content)."""


def plan_hash(nodeids: list[str]) -> str:
    """sha256 over the sorted item ids of a whole plan."""
    return hashlib.sha256("\n".join(sorted(nodeids)).encode()).hexdigest()


def read_shard(run_dir: Path) -> dict[str, Any] | None:
    """The shard a run folder holds (from `parts/shard.json`, else `run.json`), or None."""
    found = read_json(run_dir / "parts" / SHARD_FILE) or read_json(run_dir / "run.json").get(
        "shard"
    )
    return found if isinstance(found, dict) and found else None


def record_resumption(
    header: dict[str, Any], started: dict[str, Any], records: list[dict[str, Any]]
) -> None:
    """Move the session's `resumption` entry onto the run's `resumed` list, with what it
    added (records after, trials whose outcome is a retry)."""
    entry = started.get("resumption")
    header.pop("resumption", None)
    if not entry:
        return
    done = entry | {"records_after": len(records), "retried_after": retried(records)}
    header["resumed"] = [*(header.get("resumed") or []), done]
