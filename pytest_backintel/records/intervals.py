"""Intervals on rates and paired differences, each named by its method.

- One trial per case: the Wilson score interval (statsmodels `proportion_confint`).
- Several trials per case: trials of one case are not independent, so the interval is
  cluster-robust over cases: the mean of the case means with the standard error from the
  spread of the case means and a t quantile with (cases - 1) degrees of freedom. With equal
  trials per case this is exactly statsmodels' OLS of the outcome on a constant with
  `cov_type="cluster"` (CR1 correction, t with G - 1 df); never the naive one over trials.
- A paired difference: per case, the candidate's mean minus the baseline's (trials averaged
  within the case), the same t interval over those differences.

Degenerate designs, said in the method: when every case has the same mean (all pass, all fail)
the clustered standard error is 0 and says nothing, so the interval is Wilson's over the cases
(each case counted once); one case with several trials gets Wilson's over its trials.

scipy and statsmodels are imported when a figure is computed, never at import time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "PairedDifference",
    "RateInterval",
    "cluster_bounds",
    "paired_difference",
    "rate_interval",
    "wilson_bounds",
]

Outcomes = Mapping[str, Sequence[bool]]


@dataclass(frozen=True)
class RateInterval:
    """A figure with its interval and the method that made it."""

    estimate: float | None
    """The point estimate (None: nothing measured)."""
    low: float | None
    high: float | None
    method: str
    """How the interval was made, e.g. `Wilson 95%`, `cluster-robust over 40 cases, 95%`."""
    cases: int
    trials: int

    def to_json(self) -> dict[str, Any]:
        return {
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "method": self.method,
            "cases": self.cases,
            "trials": self.trials,
        }

    def text(self, fmt: str = "{:.2f}") -> str:
        """`0.62 [0.51, 0.72] (Wilson 95%)`; `n/a` when nothing was measured."""
        if self.estimate is None or self.low is None or self.high is None:
            return "n/a"
        bounds = f"[{fmt.format(self.low)}, {fmt.format(self.high)}]"
        return f"{fmt.format(self.estimate)} {bounds} ({self.method})"

    def percent(self) -> str:
        """`62.0% [51.0%, 72.0%] (Wilson 95%)`."""
        return self.text("{:.1%}")

    def bounds(self, fmt: str = "{:.1%}") -> str:
        """Only the bracket, `[51.0%, 72.0%]` (empty when nothing was measured)."""
        if self.low is None or self.high is None:
            return ""
        return f"[{fmt.format(self.low)}, {fmt.format(self.high)}]"

    def __str__(self) -> str:
        return self.text()


def _level(confidence: float) -> str:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie between 0 and 1, got {confidence!r}")
    return f"{confidence * 100:g}%"


def wilson_bounds(
    count: np.ndarray | float, nobs: np.ndarray | float, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score bounds for `count` successes of `nobs` (arrays broadcast)."""
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(count, nobs, alpha=1 - confidence, method="wilson")
    return np.clip(np.asarray(low, float), 0, 1), np.clip(np.asarray(high, float), 0, 1)


def cluster_bounds(
    case_means: np.ndarray, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(estimate, low, high) over the last axis: the mean of the case means, +- t(G-1) times
    their standard error. Vectorised: `case_means` may be (runs, cases). Not clipped."""
    from scipy.stats import t

    means = np.asarray(case_means, float)
    g = means.shape[-1]
    estimate = means.mean(axis=-1)
    se = means.std(axis=-1, ddof=1) / np.sqrt(g)
    half = t.ppf(0.5 + confidence / 2, g - 1) * se
    return estimate, estimate - half, estimate + half


def _case_means(outcomes: Outcomes) -> tuple[np.ndarray, int]:
    means = [float(np.mean(v)) for _, v in sorted(outcomes.items()) if len(v)]
    return np.asarray(means, float), sum(len(v) for v in outcomes.values())


def rate_interval(outcomes_by_case: Outcomes, confidence: float = 0.95) -> RateInterval:
    """The pass rate (the mean of the case means) with its interval: Wilson for one trial per
    case, cluster-robust over cases for several; bounds clipped to [0, 1].

    Edge cases: nothing measured -> estimate None; one case with several trials -> Wilson over
    its trials; every case with the same mean (all pass, all fail) -> Wilson over the cases.
    """
    level = _level(confidence)
    means, trials = _case_means(outcomes_by_case)
    g = len(means)
    if g == 0:
        return RateInterval(None, None, None, "nothing measured", 0, 0)
    estimate = float(means.mean())
    if trials == g:
        low, high = wilson_bounds(float(means.sum()), g, confidence)
        return RateInterval(estimate, float(low), float(high), f"Wilson {level}", g, trials)
    if g == 1:
        low, high = wilson_bounds(estimate * trials, trials, confidence)
        method = f"Wilson over {trials} trials of 1 case, {level}"
        return RateInterval(estimate, float(low), float(high), method, g, trials)
    if np.all(means == means[0]):
        low, high = wilson_bounds(estimate * g, g, confidence)
        method = f"Wilson over {g} cases (every case alike: no spread to cluster), {level}"
        return RateInterval(estimate, float(low), float(high), method, g, trials)
    _, lo, hi = cluster_bounds(means, confidence)
    method = f"cluster-robust over {g} cases, {level}"
    return RateInterval(
        estimate, float(np.clip(lo, 0, 1)), float(np.clip(hi, 0, 1)), method, g, trials
    )


def mean_interval(values_by_case: Mapping[str, float], confidence: float = 0.95) -> RateInterval:
    """The mean of one value per case (e.g. pass^k's C(c,k)/C(n,k)) with a t interval over the
    cases; a figure in [0, 1] is clipped to it. Same degenerate rules as `rate_interval`."""
    level = _level(confidence)
    values = np.asarray([v for _, v in sorted(values_by_case.items())], float)
    g = len(values)
    if g == 0:
        return RateInterval(None, None, None, "nothing measured", 0, 0)
    estimate = float(values.mean())
    if g == 1 or np.all(values == values[0]):
        if np.all((values >= 0) & (values <= 1)):
            low, high = wilson_bounds(estimate * g, g, confidence)
            method = f"Wilson over {g} case{'s' * (g != 1)} (no spread over cases), {level}"
            return RateInterval(estimate, float(low), float(high), method, g, g)
        return RateInterval(estimate, None, None, f"no interval from {g} alike cases", g, g)
    _, lo, hi = cluster_bounds(values, confidence)
    bottom, top = float(lo), float(hi)
    if np.all((values >= 0) & (values <= 1)):
        bottom, top = max(bottom, 0.0), min(top, 1.0)
    return RateInterval(estimate, bottom, top, f"t over {g} cases, {level}", g, g)


@dataclass(frozen=True)
class PairedDifference:
    """Candidate minus baseline, paired by case (trials averaged within a case)."""

    estimate: float | None
    low: float | None
    high: float | None
    method: str
    cases: int
    differences: tuple[float, ...] = ()
    """Per case, in sorted case order: candidate mean - baseline mean."""
    pooled_variance: float = 0.0
    """Sum of both runs' Bernoulli variances per case / trials, the fallback design variance."""
    confidence: float = 0.95

    def to_json(self) -> dict[str, Any]:
        return {
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "method": self.method,
            "cases": self.cases,
        }

    def text(self) -> str:
        """`+0.10 [+0.02, +0.18] (paired over 40 cases, 95%)`."""
        if self.estimate is None or self.low is None or self.high is None:
            return "n/a"
        return f"{self.estimate:+.3f} [{self.low:+.3f}, {self.high:+.3f}] ({self.method})"

    def standard_error(self) -> float:
        """The standard error of the mean difference (from the per-case differences; when they
        do not vary, from the runs' pooled Bernoulli variance)."""
        d = np.asarray(self.differences, float)
        if len(d) > 1 and d.std(ddof=1) > 0:
            return float(d.std(ddof=1) / np.sqrt(len(d)))
        return float(np.sqrt(self.pooled_variance / max(len(d), 1)))

    def p_value(self) -> float:
        """Two-sided p of the paired t test of no difference (1.0 when no case differs; 0.0
        when every case differs alike and some do)."""
        from scipy.stats import t

        d = np.asarray(self.differences, float)
        if len(d) < 2 or d.std(ddof=1) == 0:
            return 1.0 if not len(d) or d[0] == 0 else 0.0
        stat = d.mean() / (d.std(ddof=1) / np.sqrt(len(d)))
        return float(2 * t.sf(abs(stat), len(d) - 1))

    def detectable(self, power: float = 0.8, alpha: float = 0.05) -> float | None:
        """The smallest difference this design (these cases, these trials) detects with
        `power` in a two-sided test at `alpha`: (z(1 - alpha/2) + z(power)) * SE. When the
        standard error is 0 (every case alike in both runs), the upper Wilson limit on the
        share of cases that changed (0 of G)."""
        from scipy.stats import norm

        if not self.cases:
            return None
        se = self.standard_error()
        if se == 0:
            _, high = wilson_bounds(0, self.cases, 1 - alpha)
            return float(high)
        return float((norm.ppf(1 - alpha / 2) + norm.ppf(power)) * se)


def paired_difference(
    baseline: Outcomes, candidate: Outcomes, confidence: float = 0.95
) -> PairedDifference:
    """The per-case paired difference in pass rate over the cases measured in both runs, with
    a t interval over the cases (clustered by case). When every case has the same difference
    c (no spread), the interval is c times Wilson's over the cases (no case changed: within
    the upper Wilson limit on 0 changed of G, both ways)."""
    level = _level(confidence)
    common = sorted(k for k in set(baseline) & set(candidate) if baseline[k] and candidate[k])
    g = len(common)
    if g == 0:
        return PairedDifference(None, None, None, "no case measured in both runs", 0)
    b = np.asarray([np.mean(baseline[k]) for k in common], float)
    c = np.asarray([np.mean(candidate[k]) for k in common], float)
    kb = np.asarray([len(baseline[k]) for k in common], float)
    kc = np.asarray([len(candidate[k]) for k in common], float)
    pooled = float(np.mean(b * (1 - b) / kb + c * (1 - c) / kc))
    d = c - b
    estimate = float(d.mean())
    diffs = tuple(float(x) for x in d)
    if g == 1 or np.all(d == d[0]):
        _, high = wilson_bounds(0 if d[0] == 0 else g, g, confidence)
        low, top = wilson_bounds(g, g, confidence)
        if d[0] == 0:
            bounds = (-float(high), float(high))
            method = f"no case differs: Wilson limit on 0 of {g} cases changed, {level}"
        else:
            scaled = sorted((float(d[0] * low), float(d[0] * top)))
            bounds = (scaled[0], scaled[1])
            method = f"every case differs alike: Wilson over {g} cases, {level}"
        return PairedDifference(estimate, *bounds, method, g, diffs, pooled, confidence)
    _, lo, hi = cluster_bounds(d, confidence)
    method = f"paired over {g} cases, clustered by case, {level}"
    bottom, ceiling = max(float(lo), -1.0), min(float(hi), 1.0)
    return PairedDifference(estimate, bottom, ceiling, method, g, diffs, pooled, confidence)
