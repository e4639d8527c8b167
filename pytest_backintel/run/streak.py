"""Stop a run whose model provider keeps failing: consecutive `provider_error` trials.

The count lives in `results/<run-id>/provider-streak.json` under a file lock, so every xdist
worker of the run sees it. Once `--max-provider-failures` trials in a row ended as
`provider_error`, every remaining trial ends as `not_run` without calling the analyst, all
with the same message. Any other outcome resets the count.
"""

from __future__ import annotations

import json
from pathlib import Path

from filelock import FileLock

from pytest_backintel.outcomes import Outcome
from pytest_backintel.run.trial import TrialResult
from pytest_backintel.scenario import Scenario
from pytest_backintel.scoring.score import Reason, TrialScore

__all__ = ["STREAK_FILE", "ProviderStreak"]

STREAK_FILE = "provider-streak.json"


class ProviderStreak:
    """Consecutive provider failures of the run, shared by its processes."""

    def __init__(self, run_dir: Path, limit: int) -> None:
        self.limit = limit
        self.path = run_dir / STREAK_FILE
        self._lock = FileLock(str(run_dir / f"{STREAK_FILE}.lock"))

    def count(self) -> int:
        try:
            return int(json.loads(self.path.read_text(encoding="utf-8"))["consecutive"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0

    def message(self) -> str | None:
        """Why no further trial may start, or None."""
        if self.count() < self.limit:
            return None
        return (
            f"the model provider failed {self.limit} trials in a row "
            f"(--max-provider-failures {self.limit}): the remaining items were not run; "
            "check the server or the provider's status, then run again"
        )

    def gate(self, scenario: Scenario, trial: int, store_label: str) -> TrialResult | None:
        """A `not_run` result once the streak reached the limit, else None."""
        why = self.message()
        if why is None:
            return None
        score = TrialScore(Outcome.NOT_RUN, [Reason(Outcome.NOT_RUN, why)])
        return TrialResult(scenario, trial, store_label, score, None)

    def settle(self, outcome: Outcome) -> None:
        """Count a finished trial: a provider failure extends the streak, anything else ends it."""
        if outcome is Outcome.NOT_RUN:
            return
        if outcome is not Outcome.PROVIDER_ERROR and not self.path.exists():
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            count = self.count() + 1 if outcome is Outcome.PROVIDER_ERROR else 0
            self.path.write_text(json.dumps({"consecutive": count}) + "\n", encoding="utf-8")
