"""Exact statistics for paired runs: the tau-bench pass^k estimator and an exact McNemar test."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from math import comb

__all__ = ["mcnemar_exact", "pass_hat_k"]


def pass_hat_k(trials: Sequence[tuple[int, int]], k: int) -> float | None:
    """tau-bench's pass^k: the mean over cases of C(c, k) / C(n, k).

    `trials` holds `(n, c)` per case: n trials attempted, c of them passed. It estimates the
    chance that k independent trials of a case all pass. None when there is no case or some
    case has fewer than k trials (the estimator is undefined there).
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if not trials:
        return None
    total = Fraction(0)
    for n, c in trials:
        if not 0 <= c <= n:
            raise ValueError(f"passed trials {c} must lie between 0 and attempted trials {n}")
        if n < k:
            return None
        total += Fraction(comb(c, k), comb(n, k))
    return float(total / len(trials))


def mcnemar_exact(fixed: int, broken: int) -> float:
    """Two-sided exact McNemar p-value: a binomial test of the discordant pairs at 1/2.

    `fixed` cases failed in the baseline and pass in the candidate, `broken` the reverse.
    p = min(1, 2 * P(X <= min(fixed, broken))) with X ~ Binomial(fixed + broken, 1/2);
    1.0 when there is no discordant pair.
    """
    if fixed < 0 or broken < 0:
        raise ValueError(f"counts must be non-negative, got fixed={fixed}, broken={broken}")
    n = fixed + broken
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(fixed, broken) + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**n)))
