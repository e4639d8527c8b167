"""Baseline-vs-candidate promotion decision (acceptance-spec "Fixed evaluation and promotion").

Each suite (split) is decided on its own and every suite must accept:
- every mandatory case passes in the candidate (all its trials; a blocked or not-run trial
  means the case was not measured, which cannot accept);
- no regression: no case that passed in the baseline fails in the candidate (the controls);
- on the original cases (the `regression` split) an improvement: at least one case fixed,
  unless the baseline already passes every case there (nothing left to improve; noted).
Runs over different scenarios or data are not comparable, and neither is a run with a planned
trial that has no record (`Run.missing_trials`): `ComparisonRefused`, naming them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reports.load import Run
from reports.stats import mcnemar_exact
from reports.summary import CaseSummary, case_summaries, pass_k_by_split

__all__ = [
    "IMPROVEMENT_SPLITS",
    "CaseChange",
    "Comparison",
    "ComparisonRefused",
    "SuiteDecision",
    "compare_runs",
    "render_comparison",
]

IMPROVEMENT_SPLITS = frozenset({"regression"})
"""Suites holding the original failures, where the candidate must also fix something."""


class ComparisonRefused(Exception):
    """The two runs cannot be compared; the message names what differs."""


@dataclass(frozen=True)
class CaseChange:
    """One case's paired outcome."""

    scenario_id: str
    split: str
    baseline: CaseSummary
    candidate: CaseSummary

    @property
    def change(self) -> str:
        """`both_pass`, `fixed`, `broken`, `both_fail`, or `blocked` when the candidate was
        not measured (infra or provider failure, not run): never counted as broken."""
        before, after = self.baseline.passed, self.candidate.passed
        if before and after:
            return "both_pass"
        if after:
            return "fixed"
        if self.candidate.blocked:
            return "blocked"
        return "broken" if before else "both_fail"


@dataclass(frozen=True)
class SuiteDecision:
    split: str
    cases: list[CaseChange]
    reasons: list[str]
    """Why the suite rejects; empty when it accepts."""
    notes: list[str]
    p_value: float
    baseline_pass_k: dict[int, float | None] = field(default_factory=dict)
    candidate_pass_k: dict[int, float | None] = field(default_factory=dict)

    @property
    def accepted(self) -> bool:
        return not self.reasons

    def count(self, change: str) -> int:
        return sum(c.change == change for c in self.cases)


@dataclass(frozen=True)
class Comparison:
    baseline: Run
    candidate: Run
    suites: list[SuiteDecision]

    @property
    def accepted(self) -> bool:
        return bool(self.suites) and all(s.accepted for s in self.suites)

    @property
    def no_change(self) -> bool:
        return all(
            c.baseline.outcomes == c.candidate.outcomes for s in self.suites for c in s.cases
        )


def _scenario_detail(baseline: Run, candidate: Run) -> str:
    """Which cases differ: present in one run only, or at another version (sha)."""
    before = {r["scenario_id"]: r.get("scenario_sha") for r in baseline.records}
    after = {r["scenario_id"]: r.get("scenario_sha") for r in candidate.records}
    parts = []
    if only := sorted(set(before) - set(after)):
        parts.append(f"only in baseline: {', '.join(only)}")
    if only := sorted(set(after) - set(before)):
        parts.append(f"only in candidate: {', '.join(only)}")
    if changed := sorted(k for k in set(before) & set(after) if before[k] != after[k]):
        parts.append(f"changed: {', '.join(changed)}")
    return f" ({'; '.join(parts)})" if parts else ""


def check_comparable(baseline: Run, candidate: Run) -> None:
    """Raise `ComparisonRefused` unless both runs measured the same scenarios on the same data."""
    problems = []
    if not baseline.records or not candidate.records:
        empty = [n for n, r in (("baseline", baseline), ("candidate", candidate)) if not r.records]
        raise ComparisonRefused(f"nothing to compare: the {' and '.join(empty)} run has no records")
    for role, run in (("baseline", baseline), ("candidate", candidate)):
        if run.missing_trials:
            shown = ", ".join(run.missing_trials[:20])
            more = len(run.missing_trials) - 20
            raise ComparisonRefused(
                f"refusing to compare: {len(run.missing_trials)} planned trial(s) of the {role} "
                f"run {run.run_id} have no record: {shown}{f' and {more} more' if more > 0 else ''}"
                "; a trial that ended without a record was not measured"
            )
    if baseline.scenario_hash != candidate.scenario_hash:
        problems.append(
            f"scenario hash differs: baseline {baseline.scenario_hash[:12]}, "
            f"candidate {candidate.scenario_hash[:12]}{_scenario_detail(baseline, candidate)}"
        )
    worlds = sorted(set(baseline.data_hashes) | set(candidate.data_hashes))
    for world in worlds:
        before, after = baseline.data_hashes.get(world), candidate.data_hashes.get(world)
        if before != after:
            problems.append(
                f"data hash of world {world!r} differs: baseline {str(before)[:12]}, "
                f"candidate {str(after)[:12]}"
            )
    if problems:
        raise ComparisonRefused(
            "refusing to compare runs over different scenarios or data: " + "; ".join(problems)
        )


def _describe(case: CaseSummary) -> str:
    return ", ".join(case.outcomes) or "no trials"


def decide_suite(split: str, changes: list[CaseChange]) -> tuple[list[str], list[str]]:
    """(reasons to reject, notes) for one suite under the promotion policy."""
    reasons: list[str] = []
    notes: list[str] = []
    for c in changes:
        if c.change == "broken":
            reasons.append(
                f"broken: {c.scenario_id} (baseline {_describe(c.baseline)} -> "
                f"candidate {_describe(c.candidate)})"
            )
    for c in changes:
        if c.candidate.passed or c.change == "broken":
            continue
        what = "blocked, not measured" if c.candidate.blocked else "fails"
        reasons.append(f"mandatory case {what}: {c.scenario_id} ({_describe(c.candidate)})")
    if split in IMPROVEMENT_SPLITS and not any(c.change == "fixed" for c in changes):
        reasons.append("no improvement on the original cases: no case fixed")
        if all(c.baseline.passed for c in changes):
            notes.append(
                "the baseline already passes every original case, so no candidate "
                "can show the improvement this policy requires"
            )
    return reasons, notes


def compare_runs(baseline: Run, candidate: Run) -> Comparison:
    """Pair the runs case by case and decide every suite."""
    check_comparable(baseline, candidate)
    before = {(c.split, c.scenario_id): c for c in case_summaries(baseline.records)}
    after = {(c.split, c.scenario_id): c for c in case_summaries(candidate.records)}
    if set(before) != set(after):
        moved = sorted(set(before) ^ set(after))
        raise ComparisonRefused(f"cases sit in different splits in the two runs: {moved}")
    b_pass_k = pass_k_by_split(list(before.values()))
    c_pass_k = pass_k_by_split(list(after.values()))
    suites = []
    for split in sorted({s for s, _ in before}):
        changes = [
            CaseChange(case, split, before[(s, case)], after[(s, case)])
            for s, case in sorted(before)
            if s == split
        ]
        reasons, notes = decide_suite(split, changes)
        fixed = sum(c.change == "fixed" for c in changes)
        broken = sum(c.change == "broken" for c in changes)
        suites.append(
            SuiteDecision(
                split,
                changes,
                reasons,
                notes,
                mcnemar_exact(fixed, broken),
                b_pass_k.get(split, {}),
                c_pass_k.get(split, {}),
            )
        )
    return Comparison(baseline, candidate, suites)


def _fmt_k(values: dict[int, float | None]) -> str:
    return ", ".join(f"k={k}: {'n/a' if v is None else f'{v:.3f}'}" for k, v in values.items())


def _run_line(role: str, run: Run) -> str:
    who = run.analyst_name + (f" / {run.model}" if run.model else "")
    labels = "".join(f" [{b}]" for b in run.banners)
    again = f", {run.retried} retried after a blocked attempt" if run.retried else ""
    return f"{role}: {run.run_id} ({who}, {len(run.records)} trials{again}){labels}"


def render_comparison(result: Comparison) -> str:
    """The plain-text report `backintel compare` prints."""
    b, c = result.baseline, result.candidate
    hashes = ", ".join(f"{w}={h[:12]}" for w, h in b.data_hashes.items()) or "none recorded"
    lines = [
        _run_line("baseline ", b),
        _run_line("candidate", c),
        f"scenario hash {b.scenario_hash[:12]} and data hashes ({hashes}) match",
        "",
    ]
    if result.no_change:
        lines += ["no change: every case has the same outcomes in both runs", ""]
    for suite in result.suites:
        lines.append(f"suite {suite.split}: {'ACCEPT' if suite.accepted else 'REJECT'}")
        lines.append(
            f"  {len(suite.cases)} cases: both pass {suite.count('both_pass')}, "
            f"fixed {suite.count('fixed')}, broken {suite.count('broken')}, "
            f"both fail {suite.count('both_fail')}, blocked {suite.count('blocked')}; "
            f"exact McNemar p = {suite.p_value:.4f} (two-sided, discordant pairs)"
        )
        if suite.baseline_pass_k or suite.candidate_pass_k:
            lines.append(f"  pass^k baseline  {_fmt_k(suite.baseline_pass_k) or 'n/a'}")
            lines.append(f"  pass^k candidate {_fmt_k(suite.candidate_pass_k) or 'n/a'}")
        width = max(len(ch.scenario_id) for ch in suite.cases)
        for ch in suite.cases:
            lines.append(
                f"    {ch.scenario_id:<{width}}  {ch.change:<9}  "
                f"{_describe(ch.baseline)} -> {_describe(ch.candidate)}"
            )
        lines += [f"  note: {n}" for n in suite.notes]
        lines += [f"  - {r}" for r in suite.reasons]
        lines.append("")
    lines.append(f"DECISION: {'ACCEPT' if result.accepted else 'REJECT'}")
    for suite in result.suites:
        lines += [f"  - {suite.split}: {r}" for r in suite.reasons]
    if result.accepted:
        lines.append(
            "  every suite accepts: mandatory cases pass, no regression, improvement where required"
        )
    return "\n".join(lines) + "\n"
