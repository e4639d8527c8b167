"""Cost per trial and run-level budgets.

`trial_cost_usd` prices a trial's tokens with the dated `pytest_backintel/records/prices.json`
(None when the price is unknown or no model was billed, never 0). `RunBudget` keeps the run's
accumulated
usage in `results/<run-id>/budget.json` under a file lock, so every xdist worker of the run
sees the same totals: once a run budget (`--run-max-requests`, `--run-max-tokens`,
`--run-max-cost`) is spent, the remaining trials end as `budget_exceeded` without calling the
analyst, and a trial that starts gets per-trial limits no larger than what is left.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from filelock import FileLock

from pytest_backintel.analyst_api import AnalystKind, AnalystLimits, AnalystRun, Usage
from pytest_backintel.options import RunLimits
from pytest_backintel.outcomes import Outcome
from pytest_backintel.records.prices import load_prices
from pytest_backintel.run.trial import TrialResult
from pytest_backintel.scenario import Scenario
from pytest_backintel.scoring.score import Reason, TrialScore

__all__ = [
    "BUDGET_FILE",
    "RunBudget",
    "blocked_result",
    "trial_cost_usd",
]

BUDGET_FILE = "budget.json"
UNBILLED_KINDS: tuple[AnalystKind, ...] = ("calibration", "replay")
"""Analysts that call no billed model: their cost is unknown (None), never 0."""


def trial_cost_usd(
    kind: AnalystKind | None, model: str | None, usage: Usage | None
) -> float | None:
    """The trial's cost in USD from `pytest_backintel/records/prices.json`, or None when it
    is not known."""
    if usage is None or kind in UNBILLED_KINDS or not usage.tokens_reported:
        return None
    if usage.requests == 0:  # an agent of your own that asked no model: nothing to pay for
        return 0.0
    return load_prices().cost_usd(model, usage.input_tokens, usage.output_tokens)


def blocked_result(scenario: Scenario, trial: int, store_label: str, why: str) -> TrialResult:
    """The result of a trial the run budget stopped before the analyst was called."""
    score = TrialScore.from_reasons([Reason(Outcome.BUDGET_EXCEEDED, why)])
    return TrialResult(scenario, trial, store_label, score, None)


class RunBudget:
    """The run's accumulated usage, shared by every process of the run through a file lock."""

    def __init__(self, run_dir: Path, limits: RunLimits) -> None:
        self.limits = limits
        self.path = run_dir / BUDGET_FILE
        self._lock = FileLock(str(run_dir / f"{BUDGET_FILE}.lock"))

    def reset(self) -> None:
        """Start the run's ledger at zero (the controller, before any worker starts)."""
        if self.limits.active:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._lock:
                self._write(_empty())

    def totals(self) -> dict[str, Any]:
        """The ledger: requests, tokens, cost of priced trials, unpriced and counted trials."""
        if not self.path.exists():
            return _empty()
        with self._lock:
            return self._read()

    def blocked(self) -> str | None:
        """Why no further trial may start, or None while every run budget has room."""
        if not self.limits.active:
            return None
        spent = self.totals()
        checks = (
            ("--run-max-requests", self.limits.max_requests, spent["requests"], "requests"),
            ("--run-max-tokens", self.limits.max_tokens, spent["tokens"], "tokens"),
            ("--run-max-cost", self.limits.max_cost_usd, spent["cost_usd"], "USD"),
        )
        for option, limit, used, unit in checks:
            if limit is not None and used >= limit:
                return (
                    f"run budget spent: {option} {limit:g} {unit}, the run has used {used:g} "
                    f"{unit} over {spent['trials']} trials; the analyst was not called"
                )
            if limit is not None and unit != "requests" and spent["unmetered_trials"]:
                return (
                    f"run budget cannot be counted: the provider reported no token usage for "
                    f"{spent['unmetered_trials']} trial(s), so {option} cannot be enforced; the "
                    "run stops here instead of running unbounded"
                )
        return None

    def gate(self, scenario: Scenario, trial: int, store_label: str) -> TrialResult | None:
        """A `budget_exceeded` result when the run budget is spent (the analyst is not
        called), else None."""
        why = self.blocked()
        return None if why is None else blocked_result(scenario, trial, store_label, why)

    def settle(
        self, kind: AnalystKind | None, model: str | None, run: AnalystRun | None
    ) -> float | None:
        """Price a finished trial, charge it to the run budget, return its cost (or None)."""
        usage = run.usage if run is not None else None
        cost = trial_cost_usd(kind, model, usage)
        self.charge(usage, cost)
        return cost

    def cap(self, limits: AnalystLimits) -> AnalystLimits:
        """Per-trial limits no larger than what is left of the run budgets."""
        if not self.limits.active:
            return limits
        spent = self.totals()
        run = self.limits
        requests, tokens, cost = limits.max_requests, limits.max_tokens, limits.max_cost_usd
        if run.max_requests is not None:
            requests = max(1, min(requests, run.max_requests - spent["requests"]))
        if run.max_tokens is not None:
            left = max(1, run.max_tokens - spent["tokens"])
            tokens = left if tokens is None else min(tokens, left)
        if run.max_cost_usd is not None:
            left_cost = max(run.max_cost_usd - spent["cost_usd"], 1e-9)
            cost = left_cost if cost is None else min(cost, left_cost)
        return replace(limits, max_requests=requests, max_tokens=tokens, max_cost_usd=cost)

    def charge(self, usage: Usage | None, cost_usd: float | None) -> None:
        """Add one finished trial's usage (and cost, when priced) to the ledger."""
        if not self.limits.active:
            return
        with self._lock:
            spent = self._read()
            spent["trials"] += 1
            if usage is not None:
                spent["requests"] += usage.requests
                spent["tokens"] += usage.input_tokens + usage.output_tokens
                spent["unmetered_trials"] += not usage.tokens_reported
            if cost_usd is None:
                spent["unpriced_trials"] += usage is not None and usage.requests > 0
            else:
                spent["cost_usd"] += cost_usd
            self._write(spent)

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return _empty()
        return _empty() | data if isinstance(data, dict) else _empty()

    def _write(self, data: dict[str, Any]) -> None:
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(data, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(self.path)


def _empty() -> dict[str, Any]:
    return {
        "requests": 0,
        "tokens": 0,
        "cost_usd": 0.0,
        "unpriced_trials": 0,
        "unmetered_trials": 0,
        "trials": 0,
    }
