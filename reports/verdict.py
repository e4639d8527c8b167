"""A comparison a team can act on, for its own suites: `better`, `no detectable difference` or
`worse`, with the reason and the size.

Every case is paired (fixed, broken, both pass, both fail, blocked). A suite's policy (its
suite file's `policy:`, or `backintel compare --policy FILE`) may name `mandatory` cases, which
must pass in the candidate, `controls`, which must not regress, and `alpha`, the significance
level (default 0.05). The verdict, in this order:

1. `worse` when a mandatory case does not pass in the candidate (failed or blocked), or a control
   that passed in the baseline does not pass in the candidate;
2. otherwise the paired difference in pass rate decides (per case, the candidate's share of
   passed trials minus the baseline's; its (1 - alpha) interval clustered by case, see
   `pytest_backintel.records.intervals`): `better` only when the interval excludes zero on the
   better side, `worse` only when it excludes zero on the worse side; with one trial per case
   the exact two-sided McNemar test on the discordant pairs must agree (p < alpha);
3. otherwise `no detectable difference`, stating the smallest difference this pair of runs could
   have detected at 80% power and the suite's alpha.

Blocked cases (the candidate or the baseline not measured: infra or provider failure, not run)
are left out of the pairs and named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pytest_backintel.records.intervals import PairedDifference, paired_difference
from pytest_backintel.records.tally import NOT_ATTEMPTED
from reports.stats import mcnemar_exact
from reports.summary import CaseSummary

__all__ = [
    "BETTER",
    "NO_DIFFERENCE",
    "WORSE",
    "PairedCase",
    "Policy",
    "PolicyError",
    "SuiteVerdict",
    "decide_paired",
    "read_policy",
    "render_verdict",
]

BETTER = "better"
NO_DIFFERENCE = "no detectable difference"
WORSE = "worse"
DEFAULT_ALPHA = 0.05


class PolicyError(Exception):
    """A policy file or value is invalid; the message names the file, the field and the value."""


@dataclass(frozen=True)
class Policy:
    """How one suite is decided."""

    mandatory: tuple[str, ...] = ()
    """Cases that must pass in the candidate."""
    controls: tuple[str, ...] = ()
    """Cases that must not regress (pass in the baseline -> pass in the candidate)."""
    alpha: float = DEFAULT_ALPHA
    """Significance level: the paired interval is at 1 - alpha (and McNemar's test at alpha)."""
    source: str = "default"
    """Where the policy came from: `default`, `suite file`, or the `--policy` file."""

    @classmethod
    def from_mapping(cls, data: Any, source: str) -> Policy:
        """A policy from `{mandatory, controls, alpha}`; `PolicyError` naming what is wrong."""
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise PolicyError(f"{source}: a policy is a mapping, got {data!r}")
        unknown = sorted(set(data) - {"mandatory", "controls", "alpha"})
        if unknown:
            allowed = "mandatory, controls, alpha"
            raise PolicyError(f"{source}: unknown field(s) {unknown}; allowed: {allowed}")
        lists = {}
        for key in ("mandatory", "controls"):
            value = data.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise PolicyError(f"{source}: {key}: a list of case ids, got {value!r}")
            lists[key] = tuple(sorted(value))
        alpha = data.get("alpha", DEFAULT_ALPHA)
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha < 1:
            raise PolicyError(f"{source}: alpha: a number between 0 and 1, got {alpha!r}")
        return cls(lists["mandatory"], lists["controls"], float(alpha), source)

    def describe(self) -> str:
        parts = [f"alpha {self.alpha:g}"]
        if self.mandatory:
            parts.append(f"mandatory {', '.join(self.mandatory)}")
        if self.controls:
            parts.append(f"controls {', '.join(self.controls)}")
        return f"{'; '.join(parts)} ({self.source})"


def read_policy(path: Path) -> Policy:
    """A `--policy` YAML file: `{mandatory: [...], controls: [...], alpha: 0.05}`."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PolicyError(f"--policy {path}: cannot read it ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise PolicyError(f"--policy {path}: not YAML ({exc})") from exc
    return Policy.from_mapping(data, str(path))


@dataclass(frozen=True)
class PairedCase:
    """One case of an own suite, paired across the two runs."""

    scenario_id: str
    baseline: CaseSummary
    candidate: CaseSummary

    @property
    def change(self) -> str:
        """`both_pass`, `fixed`, `broken`, `both_fail`, or `blocked` (either run did not
        measure it)."""
        if self.baseline.blocked or self.candidate.blocked:
            return "blocked"
        before, after = self.baseline.passed, self.candidate.passed
        if before and after:
            return "both_pass"
        if after:
            return "fixed"
        return "broken" if before else "both_fail"


def _rate(cases: list[CaseSummary]) -> float | None:
    measured = [c for c in cases if not c.blocked]
    return sum(c.passed for c in measured) / len(measured) if measured else None


@dataclass(frozen=True)
class SuiteVerdict:
    """The verdict on one own suite: what a viewer or a CI job reads."""

    suite: str
    policy: Policy
    cases: list[PairedCase]
    verdict: str
    """`better`, `no detectable difference` or `worse`."""
    reasons: list[str]
    """Why this verdict (at least one line)."""
    notes: list[str]
    p_value: float
    """Exact two-sided McNemar p over the discordant pairs (1.0 when none)."""
    baseline_pass_rate: float | None
    candidate_pass_rate: float | None
    """Cases passed / cases measured in each run (None: nothing measured)."""
    baseline_pass_k: dict[int, float | None] = field(default_factory=dict)
    candidate_pass_k: dict[int, float | None] = field(default_factory=dict)
    difference: PairedDifference | None = None
    """Candidate minus baseline pass rate, paired by case, with its (1 - alpha) interval."""
    detectable: float | None = None
    """The smallest difference this pair could detect at 80% power and alpha."""

    def count(self, change: str) -> int:
        return sum(c.change == change for c in self.cases)

    @property
    def worse(self) -> bool:
        return self.verdict == WORSE


def _changed(c: PairedCase) -> str:
    return (
        f"{c.scenario_id} ({', '.join(c.baseline.outcomes)} -> {', '.join(c.candidate.outcomes)})"
    )


def _policy_reasons(cases: list[PairedCase], policy: Policy) -> list[str]:
    by_id = {c.scenario_id: c for c in cases}
    reasons = []
    for case_id in policy.mandatory:
        c = by_id.get(case_id)
        if c is None:
            reasons.append(f"mandatory case {case_id} is not in these runs")
        elif not c.candidate.passed:
            what = "blocked, not measured" if c.candidate.blocked else "fails"
            reasons.append(f"mandatory case {what}: {_changed(c)}")
    for case_id in policy.controls:
        c = by_id.get(case_id)
        if c is None:
            reasons.append(f"control {case_id} is not in these runs")
        elif c.baseline.passed and not c.candidate.passed:
            reasons.append(f"control regressed: {_changed(c)}")
    return reasons


def trial_passes(case: CaseSummary) -> list[bool]:
    """Whether each attempted trial of a case passed (blocked and not-run trials left out)."""
    return [o == "pass" for o in case.outcomes if o not in NOT_ATTEMPTED]


def paired_cases_difference(cases: list[PairedCase], alpha: float) -> PairedDifference:
    """The paired difference over the cases measured in both runs, at confidence 1 - alpha."""
    measured = [c for c in cases if c.change != "blocked"]
    before = {c.scenario_id: trial_passes(c.baseline) for c in measured}
    after = {c.scenario_id: trial_passes(c.candidate) for c in measured}
    return paired_difference(before, after, 1 - alpha)


def _size_reasons(
    d: PairedDifference, one_trial: bool, p: float, alpha: float
) -> tuple[str, list[str]]:
    """(verdict, reasons) from the paired interval (and McNemar's p with one trial per case)."""
    if d.estimate is None or d.low is None or d.high is None:
        return NO_DIFFERENCE, ["no case was measured in both runs"]
    size = f"paired difference {d.text()}"
    exact = f"; exact McNemar p = {p:.4f}" if one_trial else ""
    agrees = not one_trial or p < alpha
    if d.low > 0 and agrees:
        return BETTER, [f"{size} excludes 0 on the better side{exact} < alpha {alpha:g}"]
    if d.high < 0 and agrees:
        return WORSE, [f"{size} excludes 0 on the worse side{exact} < alpha {alpha:g}"]
    why = "includes 0" if d.low <= 0 <= d.high else f"excludes 0 but{exact[1:]} >= alpha {alpha:g}"
    return NO_DIFFERENCE, [
        f"{size} {why}; the smallest difference these runs could detect at 80% power, "
        f"alpha {alpha:g}, is {detectable_text(d.detectable(0.8, alpha))}"
    ]


def detectable_text(size: float | None) -> str:
    """A detectable difference as said: `0.150`, or that no difference in pass rate (at most
    1) could be detected."""
    if size is None:
        return "n/a"
    return f"{size:.3f}" if size <= 1 else f"{size:.2f}, more than any difference in pass rate"


def decide_paired(
    suite: str,
    cases: list[PairedCase],
    policy: Policy,
    pass_k: tuple[dict[int, float | None], dict[int, float | None]] = ({}, {}),
) -> SuiteVerdict:
    """The verdict on one own suite under `policy` (see the module docstring)."""
    fixed = [c for c in cases if c.change == "fixed"]
    broken = [c for c in cases if c.change == "broken"]
    p = mcnemar_exact(len(fixed), len(broken))
    notes = []
    if blocked := [c.scenario_id for c in cases if c.change == "blocked"]:
        notes.append(f"left out, not measured in both runs: {', '.join(blocked)}")
    d = paired_cases_difference(cases, policy.alpha)
    one_trial = all(len(c.baseline.outcomes) == len(c.candidate.outcomes) == 1 for c in cases)
    if reasons := _policy_reasons(cases, policy):
        verdict = WORSE
    else:
        verdict, reasons = _size_reasons(d, one_trial, p, policy.alpha)
        if d.estimate == 0 and not fixed and not broken and verdict == NO_DIFFERENCE:
            reasons.insert(0, "no case changed between the runs")
        reasons += [f"fixed: {_changed(c)}" for c in fixed]
        reasons += [f"broken: {_changed(c)}" for c in broken]
    if verdict == NO_DIFFERENCE and bool(fixed) != bool(broken):
        way = "fixed" if fixed else "broken"
        notes.append(
            f"every case that changed was {way} ({len(fixed or broken)}), but the difference is "
            "not statistically significant at this many cases and trials"
        )
    detectable = d.detectable(0.8, policy.alpha) if d.cases else None
    return SuiteVerdict(
        suite,
        policy,
        cases,
        verdict,
        reasons,
        notes,
        p,
        _rate([c.baseline for c in cases]),
        _rate([c.candidate for c in cases]),
        *pass_k,
        d,
        detectable,
    )


def render_verdict(v: SuiteVerdict) -> list[str]:
    """The plain-text lines `backintel compare` prints for one own suite."""

    def rate(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1%}"

    def fmt_k(values: dict[int, float | None]) -> str:
        return ", ".join(f"k={k}: {'n/a' if x is None else f'{x:.3f}'}" for k, x in values.items())

    lines = [
        f"suite {v.suite}: {v.verdict.upper()}",
        f"  policy: {v.policy.describe()}",
        f"  {len(v.cases)} cases: both pass {v.count('both_pass')}, fixed {v.count('fixed')}, "
        f"broken {v.count('broken')}, both fail {v.count('both_fail')}, "
        f"blocked {v.count('blocked')}",
        f"  pass rate: baseline {rate(v.baseline_pass_rate)}, candidate "
        f"{rate(v.candidate_pass_rate)}; exact McNemar p = {v.p_value:.4f} (two-sided, "
        "discordant pairs)",
    ]
    if v.difference is not None:
        lines.append(f"  paired difference (candidate - baseline): {v.difference.text()}")
        if v.verdict == NO_DIFFERENCE and v.detectable is not None:
            lines.append(
                f"  smallest detectable difference: {detectable_text(v.detectable)} "
                f"(80% power, alpha {v.policy.alpha:g})"
            )
    if v.baseline_pass_k or v.candidate_pass_k:
        lines.append(f"  pass^k baseline  {fmt_k(v.baseline_pass_k) or 'n/a'}")
        lines.append(f"  pass^k candidate {fmt_k(v.candidate_pass_k) or 'n/a'}")
    width = max((len(c.scenario_id) for c in v.cases), default=0)
    for c in v.cases:
        lines.append(
            f"    {c.scenario_id:<{width}}  {c.change:<9}  {', '.join(c.baseline.outcomes)} -> "
            f"{', '.join(c.candidate.outcomes)}"
        )
    lines += [f"  note: {n}" for n in v.notes]
    lines += [f"  - {r}" for r in v.reasons]
    return lines
