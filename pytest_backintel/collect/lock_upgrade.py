"""`backintel references build --check-upgrade`: a lock rebuilt after the harness changed.

When an upgrade of the harness changes how it fingerprints data, a lock file's data hashes no
longer match though the data did not change. Rebuilding the lock computes every reference
again; this module says, per scenario, whether its values are what the old lock held
(`unchanged`) or not (`changed <metric>: old -> new`), so the rebuild is not taken on trust.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_backintel.collect.lockfile import LockError, read_lock

__all__ = ["upgrade_lines"]

_SHOWN = 80


def _values(entry: dict[str, Any] | None) -> dict[str, Any]:
    values = (entry or {}).get("values")
    return values if isinstance(values, dict) else {}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[: _SHOWN - 3]}..."


def upgrade_lines(lock: Path, entries: dict[str, dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(one line per scenario of `entries` against the lock file as it is now, the lines of
    the scenarios whose values changed or that the old lock did not hold)."""
    try:
        old = read_lock(lock)
    except LockError:
        old = {}
    lines: list[str] = []
    changed: list[str] = []
    for sid, entry in sorted(entries.items()):
        before, now = old.get(sid), _values(entry)
        if before is None:
            line = f"{lock}: {sid}: new (the old lock had no reference for it)"
            changed.append(line)
        else:
            was = _values(before)
            diffs = [
                f"{name}: {_short(was.get(name))} -> {_short(now.get(name))}"
                for name in sorted(set(was) | set(now))
                if was.get(name) != now.get(name)
            ]
            line = f"{lock}: {sid}: " + (f"changed {'; '.join(diffs)}" if diffs else "unchanged")
            if diffs:
                changed.append(line)
        lines.append(line)
    return lines, changed
