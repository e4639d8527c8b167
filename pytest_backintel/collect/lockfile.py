"""The references lock file: a user suite's reference values, committed beside its scenarios.

`backintel references build` writes `backintel.lock.json` into every folder that holds
scenarios bound to a source of your own. Each entry keeps the values, the data hash they were
computed on and the reference spec (SQL, inline values or `module:function`) that produced
them. A run reads an entry only after the analyst has answered, and refuses one computed on
other data or from another spec, naming the scenario and both hashes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_backintel.scenario import Scenario

__all__ = [
    "LOCK_NAME",
    "LockError",
    "StaleLockError",
    "lock_path",
    "read_lock",
    "reference_for",
    "render_lock",
    "spec_of",
]

LOCK_NAME = "backintel.lock.json"
FORMAT = 1
REBUILD = "run `backintel references build` on this data and commit the lock file"


class LockError(Exception):
    """A lock file is missing, unreadable, or has no entry for a scenario."""


class StaleLockError(LockError):
    """An entry was computed on other data or from another reference spec."""


def lock_path(scenario: Scenario) -> Path:
    """`backintel.lock.json` in the folder of the scenario's file."""
    base = scenario.dataset.base_dir
    if base is None:
        raise LockError(f"scenario {scenario.id!r} was not loaded from a file: it has no lock file")
    return base / LOCK_NAME


def spec_of(scenario: Scenario) -> dict[str, Any]:
    """What an entry was computed from: the reference spec and the check query."""
    ref = scenario.reference
    return {
        "reference": ref.model_dump(mode="json", exclude_none=True) if ref else None,
        "check_sql": scenario.check_sql,
    }


def read_lock(path: Path) -> dict[str, dict[str, Any]]:
    """Scenario id -> entry; `LockError` naming the file when it is absent or malformed."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LockError(f"no lock file {path}: {REBUILD}") from None
    except (OSError, ValueError) as exc:
        raise LockError(f"{path}: not a readable lock file ({exc}): {REBUILD}") from exc
    entries = doc.get("scenarios") if isinstance(doc, dict) else None
    if not isinstance(entries, dict) or doc.get("format") != FORMAT:
        raise LockError(f"{path}: not a backintel lock file (format {FORMAT}): {REBUILD}")
    return entries


def reference_for(scenario: Scenario, data_hash: str) -> dict[str, Any]:
    """The scenario's reference values, checked against the data and the spec."""
    path = lock_path(scenario)
    entry = read_lock(path).get(scenario.id)
    if entry is None:
        raise LockError(f"{path} has no reference for scenario {scenario.id!r}: {REBUILD}")
    if entry.get("data_hash") != data_hash:
        raise StaleLockError(
            f"scenario {scenario.id!r}: its reference in {path} was computed on data "
            f"{entry.get('data_hash')}, but this run's data is {data_hash}: {REBUILD}"
        )
    if entry.get("spec") != spec_of(scenario):
        raise StaleLockError(
            f"scenario {scenario.id!r}: its reference or check query changed since {path} "
            f"was built: {REBUILD}"
        )
    values = entry.get("values")
    if not isinstance(values, dict):
        raise LockError(f"{path}: the entry for {scenario.id!r} has no values: {REBUILD}")
    return values


def render_lock(entries: dict[str, dict[str, Any]]) -> str:
    """The lock file's text: stable key order, so a rebuild on the same data is a no-op."""
    doc = {"format": FORMAT, "scenarios": dict(sorted(entries.items()))}
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
