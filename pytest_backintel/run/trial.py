"""One trial end to end: ask the analyst, re-execute its evidence, score, check the store."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from pytest_backintel.analyst_api import (
    UNSAFE_AGENT,
    Analyst,
    AnalystLimits,
    AnalystRun,
    AnalystStopped,
    AnalystTask,
    AnalystTimeout,
    BudgetExceeded,
    CalibrationKey,
    InfraError,
    ProviderError,
    Usage,
)
from pytest_backintel.contract import AnalystAnswer, Refusal
from pytest_backintel.evidence.dialects import SOURCE_DIALECT, translate
from pytest_backintel.evidence.prediction import CHECKS, Check, PermutedRun, permutation_run
from pytest_backintel.evidence.probe import DataProbe
from pytest_backintel.evidence.reexecute import (
    EvidenceBudget,
    EvidenceClock,
    EvidenceResult,
    PythonRunner,
    reexecute,
)
from pytest_backintel.evidence.source_limit import StatementTimes
from pytest_backintel.evidence.values import jsonable
from pytest_backintel.outcomes import Outcome
from pytest_backintel.records.writer import NO_USAGE_TRIAL, unguarded_warning
from pytest_backintel.run.scope import observed_reads
from pytest_backintel.run.watchdog import WatchdogTimeout, run_with_limit
from pytest_backintel.scenario import Scenario
from pytest_backintel.scoring.boundaries import Access
from pytest_backintel.scoring.prediction import score_prediction
from pytest_backintel.scoring.refusals import countable_synonyms, refusal_verdict
from pytest_backintel.scoring.rules import answer_rules
from pytest_backintel.scoring.score import Reason, TrialScore, boundary_reasons, score_answer
from pytest_backintel.tolerance import tolerance_for
from stores.base import ProvisionedStore, StoreError

__all__ = ["ItemPythonLike", "TrialResult", "calibration_key", "run_trial"]


class ItemPythonLike(Protocol):
    """The item's Python: `run` for the analyst's tool, `evidence` for re-execution."""

    def run(self, code: str) -> str: ...

    def evidence(self, code: str) -> Mapping[str, Any]: ...


@dataclass
class TrialResult:
    scenario: Scenario
    trial: int
    store_label: str
    score: TrialScore
    run: AnalystRun | None
    evidence: list[EvidenceResult] = field(default_factory=list)
    latency_s: float = 0.0
    fingerprint_before: dict[str, str] = field(default_factory=dict)
    fingerprint_after: dict[str, str] = field(default_factory=dict)
    evidence_budget: dict[str, Any] | None = None
    """The answer's evidence budget and what re-execution spent of it (`EvidenceClock`)."""
    accesses: list[Access] = field(default_factory=list)
    """Reads outside the scenario's scope, as the harness observed them."""
    scope_notes: list[str] = field(default_factory=list)
    """What of the analyst's reads could not be observed on this backend."""
    probe_gaps: list[str] = field(default_factory=list)
    """The tables the data probes keep whole (`DataProbe.notes`), when evidence ran on them."""
    probe_unguarded: str | None = None
    """Why the answer's evidence was not checked against moved data (the check query failed
    on a probe), else None: the trial is counted and shown as unguarded."""

    def to_record(self) -> dict[str, Any]:
        """The JSON-safe part of a run record that describes this trial."""
        run = self.run
        return {
            "scenario_id": self.scenario.id,
            "scenario_version": self.scenario.version,
            "trial": self.trial,
            "split": self.scenario.split.value,
            "level": self.scenario.level,
            "family": self.scenario.family,
            "answerable": self.scenario.answerable,
            "store": self.store_label,
            "outcome": self.score.outcome.value,
            "reasons": [
                {"outcome": r.outcome.value, "message": r.message, "metric": r.metric}
                for r in self.score.reasons
            ],
            "checks": [jsonable(asdict(c)) for c in self.score.checks],
            "prediction": jsonable(self.score.prediction),
            "refusal": refusal_verdict(self.scenario, run.output if run else None),
            "answer": run.output.model_dump(mode="json") if run and run.output else None,
            "evidence": [e.to_json() for e in self.evidence],
            "evidence_budget": self.evidence_budget,
            "usage": run.usage.to_json() if run else None,
            "warnings": _warnings(run)
            + ([unguarded_warning(self.probe_unguarded)] if self.probe_unguarded else []),
            "probe_gaps": self.probe_gaps,
            "probe_unguarded": self.probe_unguarded,
            "tool_calls": run.tool_calls if run else [],
            "provider_retries": run.provider_retries if run else [],
            "messages": run.messages if run else [],
            "analyst_error": run.error if run else None,
            "prohibited_access": [a.to_json() for a in self.accesses],
            "scope_notes": self.scope_notes,
            "latency_s": round(self.latency_s, 4),
            "fingerprint_before": self.fingerprint_before,
            "fingerprint_after": self.fingerprint_after,
            **_external(run),
        }


def _warnings(run: AnalystRun | None) -> list[str]:
    unsafe = run is not None and run.observed is not None and not run.observed.get("sandboxed")
    return ([UNSAFE_AGENT] if unsafe else []) + (
        [NO_USAGE_TRIAL] if run and not run.usage.tokens_reported else []
    )


def _external(run: AnalystRun | None) -> dict[str, Any]:
    """An external agent's observed facts (`AnalystRun.observed`), for its record only."""
    if run is None or run.observed is None:
        return {}
    usage_source = run.observed.get("usage_source", "none")
    unsafe = {} if run.observed.get("sandboxed", True) else {"unsafe": UNSAFE_AGENT}
    observed = {k: v for k, v in run.observed.items() if k != "exchanges"}
    return {"external": observed, "usage_source": usage_source, **unsafe}


def calibration_key(scenario: Scenario, dialect: str = SOURCE_DIALECT) -> CalibrationKey:
    """The oracle-side facts a calibration analyst is given (never a model analyst), with the
    check query in the store's dialect."""
    refusal = scenario.refusal
    return CalibrationKey(
        check_sql=translate(scenario.check_sql, dialect) if scenario.check_sql else None,
        metric_units={m.name: m.unit for m in scenario.metrics},
        metric_kinds={m.name: m.kind.value for m in scenario.metrics},
        tolerances={m.name: tolerance_for(m.kind.value) for m in scenario.metrics},
        refusal_concepts=[g[0] for g in countable_synonyms(scenario) if g] if refusal else [],
        forbidden_metric=refusal.forbidden_metric if refusal else None,
        check_python=scenario.check_python,
        planted_values={k: v for p in scenario.planted for k, v in p.values.items()},
        prediction=scenario.prediction.model_dump() if scenario.prediction else None,
    )


_STOPPED = (
    (BudgetExceeded, Outcome.BUDGET_EXCEEDED, "usage limit reached"),
    (AnalystTimeout, Outcome.TIMEOUT, "wall-clock limit reached"),
    (ProviderError, Outcome.PROVIDER_ERROR, "the model provider failed, not the analyst"),
)
_CONTRACT = (
    "answer() must return pytest_backintel.analyst_api.AnalystRun whose `output` is an "
    "AnalystAnswer, a Refusal or None"
)


def _call(analyst: Analyst, task: AnalystTask) -> Any:
    """`analyst.answer(task)`; a custom analyst runs in a watchdog thread
    (`pytest_backintel.run.watchdog`), so a hung one is stopped at the wall-clock limit (its
    thread is abandoned, the run goes on)."""
    if analyst.kind != "custom":
        return analyst.answer(task)
    try:
        return run_with_limit(lambda: analyst.answer(task), task.limits.wall_time_s)
    except WatchdogTimeout:
        raise AnalystTimeout(
            f"the custom analyst did not return within {task.limits.wall_time_s}s "
            "(--analyst-timeout); it was abandoned"
        ) from None


def _ask(analyst: Analyst, task: AnalystTask) -> tuple[AnalystRun | None, Reason | None]:
    try:
        run = _call(analyst, task)
    except AnalystStopped as exc:
        for kind, outcome, label in _STOPPED:
            if isinstance(exc, kind):
                return exc.run, Reason(outcome, f"{label}: {exc}")
        return exc.run, Reason(Outcome.ANALYST_ERROR, f"the analyst stopped: {exc}")
    except (StoreError, InfraError) as exc:
        return None, Reason(Outcome.INFRA_ERROR, f"the store or sandbox failed: {exc}")
    except Exception as exc:  # any failure of the analyst is its own outcome, never a crash
        tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return None, Reason(Outcome.ANALYST_ERROR, f"the analyst raised {tb}")
    if not isinstance(run, AnalystRun) or not isinstance(
        run.output, AnalystAnswer | Refusal | None
    ):
        got = type(run.output if isinstance(run, AnalystRun) else run).__name__
        return None, Reason(Outcome.ANALYST_ERROR, f"{_CONTRACT}; got {got}")
    if not isinstance(run.usage, Usage):
        run.usage = Usage()
    if run.output is None:
        return run, Reason(
            Outcome.ANALYST_ERROR,
            f"no contract answer: {run.error or 'the analyst returned nothing'}",
        )
    return run, None


def _harness_bug(exc: Exception, where: str) -> TrialScore:
    """`infra_error` for an unexpected exception out of the harness, with its traceback."""
    return TrialScore.from_reasons(
        [Reason(Outcome.INFRA_ERROR, str(InfraError.from_bug(exc, where)))]
    )


def run_trial(
    scenario: Scenario,
    trial: int,
    store: ProvisionedStore,
    analyst: Analyst,
    limits: AnalystLimits,
    load_reference: Callable[[Scenario], Mapping[str, Any]],
    python: ItemPythonLike | None = None,
    dialect: str = SOURCE_DIALECT,
    verify_data: Callable[[], list[str]] = list,
    case_key: str | None = None,
    probes: Callable[[], Sequence[DataProbe]] | None = None,
    permuted: Callable[[Check], PythonRunner | None] | None = None,
) -> TrialResult:
    """Run one trial. The reference is loaded only after the analyst has answered; the
        dataset's pinned files (`verify_data`) are checked before and after; evidence is also run on
        the data probes (`probes`, built only when the answer cites evidence); a prediction's
        program also on the training-label permutation and on the shuffled scoring features
    (`permuted`, a runner over the copy of each `Check`)."""
    before = store.fingerprint()
    if problems := verify_data():
        failed = TrialResult(scenario, trial, store.display_id, TrialScore(Outcome.NOT_RUN), None)
        failed.score = TrialScore.from_reasons(
            [
                Reason(Outcome.INFRA_ERROR, f"fixture data changed before the trial: {p}")
                for p in problems
            ]
        )
        return failed
    times = StatementTimes(store.connect)  # what the analyst's own statements took
    task = AnalystTask(
        question=scenario.question,
        connect=times.connect,
        store_label=store.display_id,
        limits=limits,
        calibration=calibration_key(scenario, dialect) if analyst.kind == "calibration" else None,
        run_python=python.run if python is not None else None,
        case_key=case_key,
        rules=answer_rules(scenario),
    )
    started = time.perf_counter()
    run, failure = _ask(analyst, task)
    latency = time.perf_counter() - started
    result = TrialResult(
        scenario,
        trial,
        store.display_id,
        TrialScore(Outcome.NOT_RUN),
        run,
        latency_s=latency,
        fingerprint_before=asdict(before),
    )
    reruns: dict[Check, PermutedRun | None] = {}
    if failure is not None:
        result.score = TrialScore.from_reasons([failure])
    else:
        assert run is not None
        assert run.output is not None
        if isinstance(run.output, AnalystAnswer):
            budget = EvidenceBudget(limits.evidence_max_items, limits.evidence_time_s)
            clock = EvidenceClock(budget)
            probing = probes is not None and bool(run.output.evidence)
            probing = probing and scenario.prediction is None
            try:
                chosen = probes() if probing and probes is not None else ()
                for probe in chosen:
                    probe.ready()
                clock = EvidenceClock(budget)  # building the probes is the harness's time
                result.evidence = reexecute(
                    run.output,
                    scenario,
                    store,
                    python.evidence if python else None,
                    chosen,
                    clock,
                    times,
                )
                result.probe_gaps = sorted({g for probe in chosen for g in probe.gaps(scenario)})
                unguarded = sorted({u for p in chosen if (u := p.unguarded(scenario))})
                result.probe_unguarded = "; ".join(unguarded) or None
                if scenario.prediction is not None and permuted is not None:
                    for check in CHECKS:
                        reruns[check] = permutation_run(
                            scenario, run.output, result.evidence, permuted(check), check
                        )
            except (InfraError, StoreError) as exc:
                result.score = TrialScore.from_reasons([Reason(Outcome.INFRA_ERROR, str(exc))])
                return result
            except Exception as exc:  # the harness's own code failed: never the analyst's
                result.score = _harness_bug(exc, "evidence re-execution")
                return result
            finally:
                result.evidence_budget = clock.to_json()
        try:
            reference = load_reference(scenario) if scenario.answerable else {}
        except Exception as exc:  # a missing or stale reference is the harness's fault
            result.score = TrialScore.from_reasons(
                [Reason(Outcome.INFRA_ERROR, f"no usable reference: {exc}")]
            )
            return result
        try:
            if scenario.prediction is not None and isinstance(run.output, AnalystAnswer):
                result.score = score_prediction(
                    scenario,
                    run.output,
                    result.evidence,
                    reference,
                    reruns.get("labels"),
                    reruns.get("features"),
                )
            else:
                result.score = score_answer(scenario, run.output, result.evidence, reference)
            result.accesses, result.scope_notes = observed_reads(scenario, run, store, python)
        except Exception as exc:
            result.score = _harness_bug(exc, "scoring")
            return result
        if result.accesses:
            result.score = TrialScore.from_reasons(
                [*result.score.reasons, *boundary_reasons(scenario, result.accesses)],
                result.score.checks,
            )
    try:
        after = store.fingerprint()
    except StoreError as exc:
        result.score = TrialScore.from_reasons(
            [Reason(Outcome.INFRA_ERROR, f"could not fingerprint the store: {exc}")]
        )
        return result
    result.fingerprint_after = asdict(after)
    if problems := verify_data():
        result.score = TrialScore.from_reasons(
            [
                *result.score.reasons,
                *(
                    Reason(Outcome.INFRA_ERROR, f"fixture data changed during the trial: {p}")
                    for p in problems
                ),
            ],
            result.score.checks,
        )
    if after != before:
        result.score = TrialScore.from_reasons(
            [
                *result.score.reasons,
                Reason(
                    Outcome.INFRA_ERROR,
                    "the store changed during the trial "
                    f"(logical {before.logical[:12]}→{after.logical[:12]}, "
                    f"physical {before.physical[:12]}→{after.physical[:12]}): "
                    "the read-only guard failed",
                ),
            ],
            result.score.checks,
        )
    return result
