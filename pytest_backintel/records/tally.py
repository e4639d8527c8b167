"""Outcome tallies with honest denominators, by split, level, family and store: what the
run's terminal summary prints and the reports' scorecards build on.

A trial is *attempted* unless it is blocked (`infra_error`, `provider_error`) or `not_run`;
a pass rate is passed / attempted, None ("n/a") when nothing was attempted, never 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pytest_backintel.outcomes import Outcome

__all__ = [
    "BLOCKED",
    "DIMENSIONS",
    "NOT_ATTEMPTED",
    "OUTCOME_ORDER",
    "Tally",
    "backend_of",
    "tally",
]

OUTCOME_ORDER: list[str] = [o.value for o in Outcome]
BLOCKED = {o.value for o in Outcome if o.blocked}
NOT_ATTEMPTED = {*BLOCKED, Outcome.NOT_RUN.value}


def backend_of(record: dict[str, Any]) -> str:
    """The store backend (`sqlite`), not the per-item opaque store id."""
    if record.get("backend"):
        return str(record["backend"])
    store = str(record.get("store") or "unknown")
    return store.split(":", 1)[0]


DIMENSIONS: dict[str, Callable[[dict[str, Any]], str]] = {
    "split": lambda r: str(r.get("split", "unknown")),
    "level": lambda r: str(r.get("level", "unknown")),
    "family": lambda r: str(r.get("family", "unknown")),
    "group": lambda r: str(r.get("group", "core")),
    "store": backend_of,
}
"""The dimensions a scorecard breaks outcomes down by."""


@dataclass(frozen=True)
class Tally:
    trials: int
    attempted: int
    passed: int
    blocked: int
    not_run: int
    outcomes: dict[str, int]

    @property
    def failed(self) -> int:
        return self.attempted - self.passed

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.attempted if self.attempted else None


def tally(records: Iterable[dict[str, Any]]) -> Tally:
    counts = Counter(str(r["outcome"]) for r in records)
    trials = sum(counts.values())
    blocked = sum(counts[o] for o in BLOCKED)
    not_run = counts[Outcome.NOT_RUN.value]
    ordered = {o: counts[o] for o in OUTCOME_ORDER if counts[o]}
    ordered |= {o: n for o, n in sorted(counts.items()) if o not in ordered}
    return Tally(
        trials, trials - blocked - not_run, counts[Outcome.PASS.value], blocked, not_run, ordered
    )
