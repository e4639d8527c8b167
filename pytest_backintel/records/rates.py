"""Every rate of a run with its interval: what the terminal summary, `run.json` (`intervals`),
the scorecard, the viewer and the workbook show.

- pass rate (overall and per split, level, family, store) and refusal accuracy (the pass rate
  of the unanswerable cases): `intervals.rate_interval` over the attempted trials, grouped by
  case (Wilson for one trial per case, cluster-robust over cases for several);
- pass^k: the mean over cases of C(c, k) / C(n, k) with a t interval over the cases;
- cost per solved case and latency percentiles: a percentile bootstrap over cases (cases drawn
  with replacement, each with all its trials; 2,000 resamples from a generator seeded 0), so the
  same records always give the same interval.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from math import comb
from typing import Any

import numpy as np

from pytest_backintel.records.intervals import RateInterval, mean_interval, rate_interval
from pytest_backintel.records.tally import DIMENSIONS, NOT_ATTEMPTED

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "bootstrap_over_cases",
    "case_group",
    "outcomes_by_case",
    "pass_k_by_split",
    "pass_k_intervals",
    "run_intervals",
]

BOOTSTRAP_RESAMPLES = 2000
Record = dict[str, Any]


def case_group(record: Record) -> str:
    """The case a trial belongs to: `split/scenario_id`."""
    return f"{record.get('split', 'unknown')}/{record.get('scenario_id')}"


def _attempted(records: Iterable[Record]) -> list[Record]:
    return [r for r in records if str(r.get("outcome")) not in NOT_ATTEMPTED]


def outcomes_by_case(records: Iterable[Record]) -> dict[str, list[bool]]:
    """Per case, whether each attempted trial passed (blocked and not-run trials left out)."""
    out: dict[str, list[bool]] = {}
    for r in _attempted(records):
        out.setdefault(case_group(r), []).append(r.get("outcome") == "pass")
    return out


def pass_k_intervals(outcomes: dict[str, list[bool]]) -> dict[int, RateInterval]:
    """pass^k for k = 1..the most trials of a case, each over the cases with at least k trials
    (tau-bench's estimator per case: C(c, k) / C(n, k)); empty when no case has 2 trials."""
    top = max((len(v) for v in outcomes.values()), default=0)
    if top < 2:
        return {}
    out = {}
    for k in range(1, top + 1):
        values = {
            case: comb(sum(v), k) / comb(len(v), k) for case, v in outcomes.items() if len(v) >= k
        }
        out[k] = mean_interval(values)
    return out


def bootstrap_over_cases(
    groups: Sequence[Sequence[float]],
    statistic: Callable[[np.ndarray, np.ndarray], float],
    label: str,
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> RateInterval:
    """A percentile bootstrap over cases: `statistic(values, case_index)` on the pooled values
    of the drawn cases (a case drawn twice counts twice). Seeded: same input, same interval."""
    flat = [np.asarray(g, float) for g in groups if len(g)]
    n = sum(len(g) for g in flat)
    if not flat:
        return RateInterval(None, None, None, "nothing measured", 0, 0)
    estimate = statistic(
        np.concatenate(flat), np.repeat(np.arange(len(flat)), [len(g) for g in flat])
    )
    rng = np.random.default_rng(0)
    stats = []
    for _ in range(resamples):
        pick = rng.integers(0, len(flat), len(flat))
        values = np.concatenate([flat[i] for i in pick])
        index = np.repeat(np.arange(len(pick)), [len(flat[i]) for i in pick])
        stats.append(statistic(values, index))
    finite = np.asarray([s for s in stats if np.isfinite(s)], float)
    if len(flat) < 2 or not len(finite):
        method = "no interval from one case"
        return RateInterval(float(estimate), None, None, method, len(flat), n)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(finite, [tail, 100 - tail])
    method = (
        f"{label}bootstrap over {len(flat)} cases ({resamples} resamples, seed 0), "
        f"{confidence * 100:g}%"
    )
    return RateInterval(float(estimate), float(low), float(high), method, len(flat), n)


def _latency(records: list[Record], q: float) -> RateInterval:
    by_case: dict[str, list[float]] = {}
    for r in records:
        if r.get("latency_s") is not None:
            by_case.setdefault(case_group(r), []).append(float(r["latency_s"]))
    return bootstrap_over_cases(
        [by_case[k] for k in sorted(by_case)], lambda v, _: float(np.percentile(v, q)), ""
    )


def _cost_per_solved(records: list[Record]) -> RateInterval | None:
    """Total cost / cases solved (every attempted trial passed), when every trial's cost is
    known; bootstrap over cases (a resample that solves nothing is left out)."""
    costs = [r.get("cost_usd") for r in records]
    if not records or any(c is None for c in costs):
        return None
    by_case: dict[str, list[Record]] = {}
    for r in records:
        by_case.setdefault(case_group(r), []).append(r)
    keys = sorted(by_case)
    solved = [float(all(t.get("outcome") == "pass" for t in by_case[k])) for k in keys]
    spent = [sum(float(t["cost_usd"]) for t in by_case[k]) for k in keys]

    def ratio(values: np.ndarray, index: np.ndarray) -> float:
        pairs = values.reshape(-1, 2)
        wins = pairs[:, 0].sum()
        return float(pairs[:, 1].sum() / wins) if wins else float("nan")

    groups = [[s, c] for s, c in zip(solved, spent, strict=True)]
    got = bootstrap_over_cases(groups, ratio, "")
    return None if got.estimate is None or not np.isfinite(got.estimate) else got


def pass_k_by_split(records: Sequence[Record]) -> dict[str, dict[int, RateInterval]]:
    """pass^k intervals per split (only splits where some case has several trials)."""
    splits = sorted({str(r.get("split", "unknown")) for r in records})
    found = {
        s: pass_k_intervals(outcomes_by_case(r for r in records if r.get("split", "unknown") == s))
        for s in splits
    }
    return {s: v for s, v in found.items() if v}


def run_intervals(records: Sequence[Record]) -> dict[str, Any]:
    """Every rate of the run with its interval, as JSON (`run.json` `intervals`): `pass_rate`,
    `by` (dimension -> group -> interval), `pass_k` (k -> interval, and `pass_k_by_split`),
    `refusal_accuracy`, `cost_per_solved_usd` and `latency_s` (`p50`, `p90`)."""
    records = list(records)
    attempted = _attempted(records)
    outcomes = outcomes_by_case(records)
    by: dict[str, dict[str, Any]] = {}
    for dim in DIMENSIONS:
        groups: dict[str, list[Record]] = {}
        for r in records:
            groups.setdefault(DIMENSIONS[dim](r), []).append(r)
        by[dim] = {
            k: rate_interval(outcomes_by_case(g)).to_json() for k, g in sorted(groups.items())
        }
    refusals = outcomes_by_case(r for r in records if r.get("answerable") is False)
    cost = _cost_per_solved(attempted)
    return {
        "pass_rate": rate_interval(outcomes).to_json(),
        "by": by,
        "pass_k": {str(k): v.to_json() for k, v in pass_k_intervals(outcomes).items()},
        "pass_k_by_split": {
            split: {str(k): v.to_json() for k, v in values.items()}
            for split, values in pass_k_by_split(records).items()
        },
        "refusal_accuracy": rate_interval(refusals).to_json() if refusals else None,
        "cost_per_solved_usd": cost.to_json() if cost else None,
        "latency_s": {f"p{q}": _latency(attempted, q).to_json() for q in (50, 90)},
    }
