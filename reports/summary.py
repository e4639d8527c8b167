"""Aggregations over a run's records: tallies with honest denominators, cases, latency, usage.

Denominators: a trial is *attempted* unless it is `infra_error` or `provider_error`
(*blocked*: the store, harness or the model's service failed) or `not_run`. Pass rates are
passed / attempted; with nothing attempted the rate is None ("n/a"), never 0.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pytest_backintel.outcomes import Outcome
from pytest_backintel.records.prices import PriceTable, load_prices
from pytest_backintel.records.rates import run_intervals
from pytest_backintel.records.tally import (
    DIMENSIONS,
    NOT_ATTEMPTED,
    OUTCOME_ORDER,
    Tally,
    backend_of,
    tally,
)
from reports.load import Run
from reports.stats import pass_hat_k

__all__ = [
    "DIMENSIONS",
    "OUTCOME_ORDER",
    "CaseSummary",
    "Latency",
    "RunSummary",
    "Tally",
    "UsageTotals",
    "backend_of",
    "case_summaries",
    "summarize",
    "tally",
]


@dataclass(frozen=True)
class CaseSummary:
    """Every trial of one case. A case passes only if every attempted trial passed and none
    was blocked or not run (failed trials are never dropped in favour of a lucky retry)."""

    scenario_id: str
    split: str
    level: str
    family: str
    answerable: bool | None
    outcomes: list[str]

    @property
    def attempted(self) -> int:
        return sum(o not in NOT_ATTEMPTED for o in self.outcomes)

    @property
    def passed_trials(self) -> int:
        return sum(o == Outcome.PASS.value for o in self.outcomes)

    @property
    def blocked(self) -> bool:
        return any(o in NOT_ATTEMPTED for o in self.outcomes) or not self.outcomes

    @property
    def passed(self) -> bool:
        return not self.blocked and self.passed_trials == len(self.outcomes)

    @property
    def status(self) -> str:
        if self.passed:
            return "pass"
        return "blocked" if self.blocked else "fail"


def case_summaries(records: Iterable[dict[str, Any]]) -> list[CaseSummary]:
    """One summary per (split, scenario id), sorted; trials in trial order."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        grouped[(str(record.get("split", "unknown")), str(record["scenario_id"]))].append(record)
    out = []
    for (split, case), trials in sorted(grouped.items()):
        trials.sort(key=lambda r: int(r.get("trial", 0)))
        first = trials[0]
        out.append(
            CaseSummary(
                case,
                split,
                str(first.get("level", "unknown")),
                str(first.get("family", "unknown")),
                first.get("answerable"),
                [str(r["outcome"]) for r in trials],
            )
        )
    return out


@dataclass(frozen=True)
class Latency:
    count: int
    median_s: float | None
    min_s: float | None
    max_s: float | None


def latency(records: Iterable[dict[str, Any]]) -> Latency:
    values = [float(r["latency_s"]) for r in records if r.get("latency_s") is not None]
    if not values:
        return Latency(0, None, None, None)
    return Latency(len(values), statistics.median(values), min(values), max(values))


@dataclass(frozen=True)
class UsageTotals:
    requests: int
    input_tokens: int
    output_tokens: int
    tool_calls: int
    cost_usd: float | None
    """None when any trial's model price or token count is unknown ("unknown", never 0)."""
    prices_as_of: str
    unreported_trials: int = 0
    """Trials whose provider reported no token usage: their tokens are not in the sums."""


def usage_totals(
    records: list[dict[str, Any]], model: str | None, prices: PriceTable
) -> UsageTotals:
    sums: Counter[str] = Counter()
    cost: float | None = 0.0
    for record in records:
        usage = record.get("usage") or {}
        if usage.get("tokens_reported") is False:
            sums["unreported"] += 1
            cost = None
        for key in ("requests", "input_tokens", "output_tokens", "tool_calls"):
            sums[key] += int(usage.get(key) or 0)
        trial_cost = (
            0.0  # an agent of your own that asked no model: nothing to pay for
            if usage.get("requests") == 0
            and usage.get("tokens_reported") is not False
            and (record.get("analyst") or {}).get("kind") == "custom"
            else prices.cost_usd(
                record.get("model") or model,
                int(usage.get("input_tokens") or 0),
                int(usage.get("output_tokens") or 0),
            )
        )
        cost = None if cost is None or trial_cost is None else cost + trial_cost
    if not records:
        cost = prices.cost_usd(model, 0, 0)
    return UsageTotals(
        sums["requests"],
        sums["input_tokens"],
        sums["output_tokens"],
        sums["tool_calls"],
        cost,
        prices.as_of,
        sums["unreported"],
    )


@dataclass(frozen=True)
class RunSummary:
    run: Run
    overall: Tally
    breakdowns: dict[str, list[tuple[str, Tally]]]
    cases: list[CaseSummary]
    latency: Latency
    usage: UsageTotals
    pass_k: dict[str, dict[int, float | None]] = field(default_factory=dict)
    """split -> k -> pass^k over that split's cases (only where some case has > 1 trial)."""
    intervals: dict[str, Any] = field(default_factory=dict)
    """Every rate with its interval (`pytest_backintel.records.rates.run_intervals`)."""


def _group(
    records: list[dict[str, Any]], key: Callable[[dict[str, Any]], str]
) -> list[tuple[str, Tally]]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        grouped[key(record)].append(record)
    return [(name, tally(items)) for name, items in sorted(grouped.items())]


def pass_k_by_split(cases: list[CaseSummary]) -> dict[str, dict[int, float | None]]:
    """pass^k for k = 1..max trials per split, over cases with attempted trials."""
    out: dict[str, dict[int, float | None]] = {}
    for split in sorted({c.split for c in cases}):
        counts = [(c.attempted, c.passed_trials) for c in cases if c.split == split and c.attempted]
        top = max((n for n, _ in counts), default=0)
        if top > 1:
            out[split] = {k: pass_hat_k(counts, k) for k in range(1, top + 1)}
    return out


def summarize(run: Run, prices: PriceTable | None = None) -> RunSummary:
    """Every aggregate a scorecard, chart or workbook shows."""
    records = run.records
    cases = case_summaries(records)
    return RunSummary(
        run=run,
        overall=tally(records),
        breakdowns={name: _group(records, key) for name, key in DIMENSIONS.items()},
        cases=cases,
        latency=latency(records),
        usage=usage_totals(records, run.model, prices or load_prices()),
        pass_k=pass_k_by_split(cases),
        intervals=run_intervals(records),
    )
