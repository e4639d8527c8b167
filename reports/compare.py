"""Baseline-vs-candidate promotion decision (acceptance-spec "Fixed evaluation and promotion").

Each suite (split) is decided on its own and every suite must accept:
- every mandatory case passes in the candidate (all its trials; a blocked or not-run trial
  means the case was not measured, which cannot accept);
- no regression: no case that passed in the baseline fails in the candidate (the controls);
- on the original cases (the `regression` split) an improvement: at least one case fixed,
  unless the baseline already passes every case there (nothing left to improve; noted).
Runs over different scenarios or data are not comparable (unless asked to pair the same
scenarios across bindings, which is said), and neither is a run with a planned trial that has
no record (`Run.missing_trials`): `ComparisonRefused`, naming them.

A user's own suites (named in run.json `suites`) are not decided by this promotion policy but
by `reports.verdict`: `better`, `no detectable difference` or `worse`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from pytest_backintel.records.intervals import PairedDifference, paired_difference
from reports.load import Run
from reports.stats import mcnemar_exact
from reports.summary import CaseSummary, case_summaries, pass_k_by_split
from reports.verdict import (
    BETTER,
    NO_DIFFERENCE,
    WORSE,
    PairedCase,
    Policy,
    SuiteVerdict,
    decide_paired,
    render_verdict,
    trial_passes,
)

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
    difference: PairedDifference | None = None
    """Candidate minus baseline pass rate, paired by case (95%); the decision does not use it."""

    @property
    def accepted(self) -> bool:
        return not self.reasons

    def count(self, change: str) -> int:
        return sum(c.change == change for c in self.cases)


@dataclass(frozen=True)
class Comparison:
    """Both runs, the shipped suites' promotion decisions and the own suites' verdicts."""

    baseline: Run
    candidate: Run
    suites: list[SuiteDecision]
    """The shipped acceptance, reserved and regression splits (promotion policy)."""
    verdicts: list[SuiteVerdict] = field(default_factory=list)
    """A user's own suites: better / no detectable difference / worse."""
    bindings: list[str] = field(default_factory=list)
    """When paired across bindings: each dataset whose data differ, with both hashes."""

    @property
    def accepted(self) -> bool:
        return bool(self.suites) and all(s.accepted for s in self.suites)

    @property
    def own_verdict(self) -> str | None:
        """The own suites' overall verdict: `worse` if any is, else `better` if any is, else
        `no detectable difference` (None without own suites)."""
        found = {v.verdict for v in self.verdicts}
        if not found:
            return None
        return WORSE if WORSE in found else BETTER if BETTER in found else NO_DIFFERENCE

    @property
    def verdict(self) -> str:
        """The headline: `ACCEPT` / `REJECT` for the shipped suites, the own suites' verdict,
        or both (`REJECT; better`)."""
        parts = [("ACCEPT" if self.accepted else "REJECT")] if self.suites else []
        return "; ".join(parts + ([self.own_verdict] if self.own_verdict else [])) or "REJECT"

    @property
    def ok(self) -> bool:
        """What the exit status says: every shipped suite accepts, no own suite is worse."""
        shipped = all(s.accepted for s in self.suites)
        return shipped and self.own_verdict != WORSE and bool(self.suites or self.verdicts)

    @property
    def no_change(self) -> bool:
        pairs = [(c.baseline, c.candidate) for s in self.suites for c in s.cases]
        pairs += [(c.baseline, c.candidate) for v in self.verdicts for c in v.cases]
        return all(b.outcomes == a.outcomes for b, a in pairs)


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


def check_comparable(baseline: Run, candidate: Run, across_bindings: bool = False) -> list[str]:
    """Raise `ComparisonRefused` unless both runs measured the same scenarios on the same data;
    with `across_bindings`, data may differ: each difference is returned, to be said."""
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
    differ = []
    for world in worlds:
        before, after = baseline.data_hashes.get(world), candidate.data_hashes.get(world)
        if before != after:
            differ.append(
                f"data hash of world {world!r} differs: baseline {str(before)[:12]}, "
                f"candidate {str(after)[:12]}"
            )
    if not across_bindings:
        problems += differ
    if problems:
        hint = "" if across_bindings or not differ else (
            " (to pair the same scenarios over other data on purpose, --across-bindings)"
        )  # fmt: skip
        raise ComparisonRefused(
            "refusing to compare runs over different scenarios or data: "
            + "; ".join(problems)
            + hint
        )
    return differ


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


def own_suites(baseline: Run, candidate: Run) -> dict[str, dict[str, Any]]:
    """A user's own suites in either run: name -> what run.json `suites` records."""
    found: dict[str, dict[str, Any]] = {}
    for run in (baseline, candidate):
        suites = run.header.get("suites")
        if isinstance(suites, dict):
            found |= {str(k): v for k, v in suites.items() if isinstance(v, dict)}
    return found


def _verdicts(
    baseline: list[dict[str, Any]],
    candidate: list[dict[str, Any]],
    suites: dict[str, dict[str, Any]],
    override: Policy | None,
) -> list[SuiteVerdict]:
    out = []
    for name in sorted(suites):
        before = {
            c.scenario_id: c for c in case_summaries(r for r in baseline if r.get("suite") == name)
        }
        after = {
            c.scenario_id: c for c in case_summaries(r for r in candidate if r.get("suite") == name)
        }
        if set(before) != set(after):
            moved = sorted(set(before) ^ set(after))
            raise ComparisonRefused(f"suite {name}: cases in one run only: {moved}")
        policy = override or Policy.from_mapping(suites[name].get("policy"), "suite file")
        if override is None and policy == Policy(source="suite file"):
            policy = Policy()
        pairs = [PairedCase(i, before[i], after[i]) for i in sorted(before)]
        pass_k = (_pass_k(list(before.values())), _pass_k(list(after.values())))
        out.append(decide_paired(name, pairs, policy, pass_k))
    return out


def _difference(changes: list[CaseChange]) -> PairedDifference:
    measured = [c for c in changes if not (c.baseline.blocked or c.candidate.blocked)]
    return paired_difference(
        {c.scenario_id: trial_passes(c.baseline) for c in measured},
        {c.scenario_id: trial_passes(c.candidate) for c in measured},
    )


def _pass_k(cases: list[CaseSummary]) -> dict[int, float | None]:
    return next(iter(pass_k_by_split([replace(c, split="") for c in cases]).values()), {})


def compare_runs(
    baseline: Run,
    candidate: Run,
    *,
    policy: Policy | str | None = None,
    across_bindings: bool = False,
) -> Comparison:
    """Pair the runs case by case and decide every suite: the shipped splits by the promotion
    policy, a user's own suites by a verdict (`policy`: a `Policy` for every own suite, or
    `"acceptance"` to decide them by the promotion policy too)."""
    bindings = check_comparable(baseline, candidate, across_bindings)
    suites = {} if policy == "acceptance" else own_suites(baseline, candidate)
    override = policy if isinstance(policy, Policy) else None
    verdicts = _verdicts(baseline.records, candidate.records, suites, override)
    shipped_b = [r for r in baseline.records if r.get("suite") not in suites]
    shipped_c = [r for r in candidate.records if r.get("suite") not in suites]
    before = {(c.split, c.scenario_id): c for c in case_summaries(shipped_b)}
    after = {(c.split, c.scenario_id): c for c in case_summaries(shipped_c)}
    if set(before) != set(after):
        moved = sorted(set(before) ^ set(after))
        raise ComparisonRefused(f"cases sit in different splits in the two runs: {moved}")
    b_pass_k = pass_k_by_split(list(before.values()))
    c_pass_k = pass_k_by_split(list(after.values()))
    decisions = []
    for split in sorted({s for s, _ in before}):
        changes = [
            CaseChange(case, split, before[(s, case)], after[(s, case)])
            for s, case in sorted(before)
            if s == split
        ]
        reasons, notes = decide_suite(split, changes)
        fixed = sum(c.change == "fixed" for c in changes)
        broken = sum(c.change == "broken" for c in changes)
        decisions.append(
            SuiteDecision(
                split,
                changes,
                reasons,
                notes,
                mcnemar_exact(fixed, broken),
                b_pass_k.get(split, {}),
                c_pass_k.get(split, {}),
                _difference(changes),
            )
        )
    return Comparison(baseline, candidate, decisions, verdicts, bindings)


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
        f"scenario hash {b.scenario_hash[:12]} and data hashes ({hashes}) match"
        if not result.bindings
        else f"scenario hash {b.scenario_hash[:12]} matches; paired across bindings on purpose",
        *[f"  {line}" for line in result.bindings],
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
        if suite.difference is not None and suite.difference.estimate is not None:
            lines.append(f"  paired difference (candidate - baseline): {suite.difference.text()}")
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
    for verdict in result.verdicts:
        lines += [*render_verdict(verdict), ""]
    if result.suites:
        lines.append(f"DECISION: {'ACCEPT' if result.accepted else 'REJECT'}")
        for suite in result.suites:
            lines += [f"  - {suite.split}: {r}" for r in suite.reasons]
        if result.accepted:
            lines.append(
                "  every suite accepts: mandatory cases pass, no regression, improvement where "
                "required"
            )
    if result.verdicts:
        lines.append(f"VERDICT: {result.own_verdict}")
        lines += [f"  - {v.suite}: {v.verdict}: {v.reasons[0]}" for v in result.verdicts]
    return "\n".join(lines) + "\n"
