"""Three or more runs: every pair, paired by case, with Holm's correction over the pairs.

Each pair's difference is the per-case paired difference in pass rate (trials averaged within a
case, clustered by case; `pytest_backintel.records.intervals`), shown with its unadjusted
(1 - alpha) interval. Its p-value is the exact McNemar test when every case has one trial in
both runs, else the paired t test over the cases. Holm's step-down correction
(`statsmodels.stats.multitest.multipletests(method="holm")`) adjusts the p-values over all
pairs; a pair's verdict is `better` or `worse` (the second run against the first) only when its
Holm-adjusted p is below alpha, else `no detectable difference` with the smallest difference
that pair could detect at 80% power.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from pytest_backintel.records.intervals import PairedDifference, paired_difference, rate_interval
from reports.compare import check_comparable
from reports.load import Run
from reports.stats import mcnemar_exact
from reports.summary import case_summaries
from reports.verdict import BETTER, NO_DIFFERENCE, WORSE, detectable_text, trial_passes

__all__ = ["PairResult", "Pairwise", "compare_many", "render_pairwise"]

Outcomes = dict[str, list[bool]]


@dataclass(frozen=True)
class PairResult:
    """The second run against the first."""

    first: str
    second: str
    difference: PairedDifference
    test: str
    """`exact McNemar` (one trial per case) or `paired t over cases`."""
    p_value: float
    adjusted_p: float
    """Holm-adjusted over every pair."""
    verdict: str
    """`better`, `worse` (the second run against the first) or `no detectable difference`."""
    detectable: float | None


@dataclass(frozen=True)
class Pairwise:
    runs: list[Run]
    outcomes: list[Outcomes]
    pairs: list[PairResult]
    alpha: float

    @property
    def ok(self) -> bool:
        """No run is worse than the first (the baseline)."""
        first = self.runs[0].run_id
        return not any(p.first == first and p.verdict == WORSE for p in self.pairs)


def _outcomes(run: Run) -> Outcomes:
    """Per (split/case) key the attempted trials' passes; cases with a blocked trial left out."""
    return {
        f"{c.split}/{c.scenario_id}": trial_passes(c)
        for c in case_summaries(run.records)
        if not c.blocked
    }


def _test(a: Outcomes, b: Outcomes, d: PairedDifference) -> tuple[str, float]:
    common = set(a) & set(b)
    if all(len(a[k]) == len(b[k]) == 1 for k in common):
        fixed = sum(not a[k][0] and b[k][0] for k in common)
        broken = sum(a[k][0] and not b[k][0] for k in common)
        return "exact McNemar", mcnemar_exact(fixed, broken)
    return "paired t over cases", d.p_value()


def compare_many(runs: list[Run], alpha: float = 0.05, across_bindings: bool = False) -> Pairwise:
    """Every pair of `runs` (in the order given), Holm-corrected; `ComparisonRefused` when two
    runs measured other scenarios or data."""
    from statsmodels.stats.multitest import multipletests

    for first, second in combinations(runs, 2):
        check_comparable(first, second, across_bindings)
    outcomes = [_outcomes(run) for run in runs]
    raw = []
    for i, j in combinations(range(len(runs)), 2):
        d = paired_difference(outcomes[i], outcomes[j], 1 - alpha)
        raw.append((i, j, d, *_test(outcomes[i], outcomes[j], d)))
    _, adjusted, _, _ = multipletests([r[4] for r in raw], alpha=alpha, method="holm")
    pairs = []
    for (i, j, d, test, p), p_adj in zip(raw, adjusted, strict=True):
        significant = p_adj < alpha and d.estimate not in (None, 0)
        verdict = NO_DIFFERENCE
        if significant and d.estimate is not None:
            verdict = BETTER if d.estimate > 0 else WORSE
        detectable = d.detectable(0.8, alpha)
        pairs.append(
            PairResult(
                runs[i].run_id, runs[j].run_id, d, test, p, float(p_adj), verdict, detectable
            )
        )
    return Pairwise(runs, outcomes, pairs, alpha)


def render_pairwise(result: Pairwise) -> str:
    """The plain-text table `backintel compare A B C ...` prints."""
    n = len(result.pairs)
    lines = [f"{len(result.runs)} runs, every pair paired by case:"]
    width = max(6, *(len(r.run_id) for r in result.runs))
    for run, outcomes in zip(result.runs, result.outcomes, strict=True):
        who = run.analyst_name + (f" / {run.model}" if run.model else "")
        rate = rate_interval(outcomes, 1 - result.alpha).percent()
        lines.append(f"  {run.run_id:<{width}}  pass rate {rate}  ({who})")
    lines += [
        "",
        f"pairs (second - first), Holm's correction over {n} comparison{'s' * (n != 1)}, "
        f"alpha {result.alpha:g}; intervals unadjusted, {1 - result.alpha:.0%}:",
    ]
    head = f"  {'first':<{width}}  {'second':<{width}}  {'difference [interval]':<26}"
    lines.append(f"{head}  {'p':>7}  {'Holm p':>7}  verdict")
    for p in result.pairs:
        d = p.difference
        size = "n/a" if d.low is None else f"{d.estimate:+.3f} [{d.low:+.3f}, {d.high:+.3f}]"
        verdict = p.verdict
        if verdict == NO_DIFFERENCE:
            verdict += f" (detectable: {detectable_text(p.detectable)})"
        lines.append(
            f"  {p.first:<{width}}  {p.second:<{width}}  {size:<26}  {p.p_value:>7.4f}  "
            f"{p.adjusted_p:>7.4f}  {verdict}"
        )
    tests = sorted({p.test for p in result.pairs})
    methods = sorted({p.difference.method for p in result.pairs})
    lines += ["", f"p: {', '.join(tests)}; intervals: {'; '.join(methods)}"]
    worse = [
        p.second for p in result.pairs if p.first == result.runs[0].run_id and p.verdict == WORSE
    ]
    lines.append(
        f"VERDICT: {', '.join(worse)} worse than the baseline {result.runs[0].run_id}"
        if worse
        else f"VERDICT: no run is worse than the baseline {result.runs[0].run_id}"
    )
    return "\n".join(lines) + "\n"
