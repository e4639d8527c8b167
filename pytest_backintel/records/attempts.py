"""A trial's attempts: a retried trial's new record supersedes the earlier ones it carries.

A trial that ended blocked (`provider_error`, `infra_error`, `not_run`) may be run again by
`--retry-blocked`. Its new record has `attempt` (2, 3, ...) and `attempts`, the earlier
records of that trial (each without its own `attempts`), oldest first. The part files keep
every line as written; `final_rows` keeps, per item, only the records of its highest attempt,
so `records.jsonl` and every report see one outcome per trial.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

__all__ = [
    "BLOCKED_OUTCOMES",
    "attempt_fields",
    "attempt_of",
    "final_rows",
    "retried",
]

BLOCKED_OUTCOMES = frozenset({"provider_error", "infra_error", "not_run"})
"""Outcomes that did not measure the analyst: the trials `--retry-blocked` runs again."""

T = TypeVar("T")


def attempt_of(record: dict[str, Any]) -> int:
    """The record's attempt number (1 for a trial never retried)."""
    value = record.get("attempt")
    return value if isinstance(value, int) and value >= 1 else 1


def final_rows(rows: Sequence[tuple[dict[str, Any], T]]) -> list[tuple[dict[str, Any], T]]:
    """The rows less those superseded by a later attempt of the same item (order kept).

    Rows of attempt 1 only (plain runs, `--append-run` copies) are all kept."""
    top: dict[str, int] = {}
    for record, _ in rows:
        key = str(record.get("nodeid"))
        top[key] = max(top.get(key, 1), attempt_of(record))
    return [row for row in rows if attempt_of(row[0]) >= top[str(row[0].get("nodeid"))]]


def attempt_fields(earlier: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """`attempt` and `attempts` for a new record of a trial whose earlier records are
    `earlier` (its final records and the attempts they carry)."""
    flat: list[dict[str, Any]] = []
    for record in earlier:
        flat += [*record.get("attempts", []), {k: v for k, v in record.items() if k != "attempts"}]
    flat.sort(key=attempt_of)
    return {"attempt": max((attempt_of(r) for r in flat), default=0) + 1, "attempts": flat}


def retried(records: Iterable[dict[str, Any]]) -> int:
    """How many trials' outcomes come from a retry (attempt above 1)."""
    return sum(1 for r in records if attempt_of(r) > 1)
