"""The leaderboard of a model matrix: each model's pass rate with its interval, tokens, cost and
latency, and ranks that tie where the paired comparison cannot separate two models.

A model's pass rate is over its attempted trials (blocked and not-run trials are counted apart,
never as failures), with `records.intervals.rate_interval`: Wilson for one trial per case,
cluster-robust over cases for several. Models are ordered by pass rate; each one shares the rank
of the first model of the rank above it when their paired difference by case
(`records.intervals.paired_difference`, over the cases both attempted) has an interval that
contains 0, and otherwise takes its own place (1, 1, 3, ...).

The terminal summary, `matrix.json`, `backintel report` (`leaderboard.md/html`) and
`backintel view` all show these rows.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_backintel.records.intervals import paired_difference, rate_interval
from pytest_backintel.records.tally import NOT_ATTEMPTED

__all__ = ["LeaderRow", "leaderboard", "leaderboard_lines", "outcomes_by_case"]


def outcomes_by_case(records: Iterable[dict[str, Any]]) -> dict[str, list[bool]]:
    """Pass (True) or not per attempted trial, by case (`suite/scenario_id`)."""
    out: dict[str, list[bool]] = {}
    for record in records:
        if record.get("outcome") in NOT_ATTEMPTED:
            continue
        key = f"{record.get('suite', 'benchmark')}/{record.get('scenario_id')}"
        out.setdefault(key, []).append(record.get("outcome") == "pass")
    return out


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class LeaderRow:
    """One model's line of the leaderboard."""

    model: str
    folder: str
    """The model's run folder under the matrix folder."""
    rank: int
    pass_rate: dict[str, Any]
    """`RateInterval.to_json()`: estimate, low, high, method, cases, trials."""
    trials: int
    attempted: int
    passed: int
    blocked: int
    tokens: int | None
    """Input plus output tokens of every trial (None when a trial's provider reported none)."""
    cost_usd: float | None
    """Summed cost (None when any attempted trial's cost is unknown)."""
    latency_p50_s: float | None
    latency_p90_s: float | None
    versus_above: dict[str, Any] | None = None
    """The paired difference to the model this one's rank was decided against (None for the
    first): `PairedDifference.to_json()` with `against`."""

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))


def _row(model: str, folder: str, records: Sequence[dict[str, Any]]) -> LeaderRow:
    attempted = [r for r in records if r.get("outcome") not in NOT_ATTEMPTED]
    usage = [r.get("usage") or {} for r in records]
    tokens_known = all(u.get("tokens_reported", True) is not False for u in usage)
    tokens = sum(int(u.get("input_tokens") or 0) + int(u.get("output_tokens") or 0) for u in usage)
    costs = [_number(r.get("cost_usd")) for r in attempted]
    latency = sorted(x for r in records if (x := _number(r.get("latency_s"))) is not None)
    quantiles = statistics.quantiles(latency, n=10, method="inclusive") if len(latency) > 1 else []
    return LeaderRow(
        model=model,
        folder=folder,
        rank=0,
        pass_rate=rate_interval(outcomes_by_case(records)).to_json(),
        trials=len(records),
        attempted=len(attempted),
        passed=sum(1 for r in attempted if r.get("outcome") == "pass"),
        blocked=len(records) - len(attempted),
        tokens=tokens if tokens_known else None,
        cost_usd=(
            round(sum(c for c in costs if c is not None), 6)
            if costs and None not in costs
            else None
        ),
        latency_p50_s=statistics.median(latency) if latency else None,
        latency_p90_s=quantiles[8] if quantiles else (latency[0] if latency else None),
    )


def leaderboard(
    by_model: Mapping[str, Sequence[dict[str, Any]]], folders: Mapping[str, str]
) -> list[LeaderRow]:
    """The ranked rows of every model, best pass rate first (equal rates by model name); a
    model with no attempted trial, or none in a case the leader attempted, is not tied: it
    takes its own place, last."""
    rows = [_row(m, folders[m], records) for m, records in by_model.items()]
    rows.sort(
        key=lambda r: (r.pass_rate["estimate"] is None, -(r.pass_rate["estimate"] or 0), r.model)
    )
    ranked: list[LeaderRow] = []
    leader: LeaderRow | None = None
    for place, row in enumerate(rows, start=1):
        if leader is None:
            ranked.append(leader := _with(row, rank=1))
            continue
        diff = paired_difference(
            outcomes_by_case(by_model[leader.model]), outcomes_by_case(by_model[row.model])
        )
        tied = diff.low is not None and diff.high is not None and diff.low <= 0 <= diff.high
        versus = diff.to_json() | {"against": leader.model, "separated": not tied}
        ranked.append(new := _with(row, rank=leader.rank if tied else place, versus_above=versus))
        if not tied:
            leader = new
    return ranked


def _with(row: LeaderRow, **changes: Any) -> LeaderRow:
    return LeaderRow(**(row.to_json() | changes))


def _pct(value: Any) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def leaderboard_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The terminal's leaderboard: one line per model, rank, pass rate with its interval and
    method, tokens, cost and latency ([] for no rows)."""
    if not rows:
        return []
    lines = ["backintel: leaderboard (ranks tie where the paired difference's interval holds 0)"]
    for row in rows:
        rate = row["pass_rate"]
        bounds = (
            f" [{_pct(rate['low'])}, {_pct(rate['high'])}]" if rate.get("low") is not None else ""
        )
        cost = "n/a" if row.get("cost_usd") is None else f"${row['cost_usd']:.4f}"
        tokens = "n/a" if row.get("tokens") is None else f"{row['tokens']}"
        p50 = row.get("latency_p50_s")
        latency = "n/a" if p50 is None else f"{p50:.2f}s"
        lines.append(
            f"backintel:   #{row['rank']} {row['model']}: pass {_pct(rate['estimate'])}{bounds} "
            f"({rate['method']}; {row['passed']}/{row['attempted']} attempted, "
            f"{row['blocked']} blocked), tokens {tokens}, cost {cost}, latency p50 {latency}"
        )
    return lines
