"""Scoring a prediction scenario without a judge: scikit-learn metrics of the predictions and
of the evaluator's baseline against the hidden labels, each reported on its own, and the
scenario's pass criteria (all required) checked against the baseline.

The program that produced the predictions must be cited as Python evidence, reproduce them
within the declared tolerance, and lose its edge when re-run with the training labels
permuted and when re-run with the scoring features shuffled between entities, where its
predictions must also move (`pytest_backintel.evidence.prediction`); otherwise the trial is
`unsupported_evidence`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_backintel.contract import AnalystAnswer
from pytest_backintel.evidence.prediction import PermutedRun
from pytest_backintel.evidence.predictions_table import prediction_rows
from pytest_backintel.evidence.reexecute import EvidenceResult
from pytest_backintel.outcomes import Outcome
from pytest_backintel.scenario import CRITERION, PredictionSpec, Scenario
from pytest_backintel.scoring.score import Reason, TrialScore, evidence_reasons

__all__ = [
    "Criterion",
    "check_criteria",
    "hidden_cohort",
    "prediction_metrics",
    "score_prediction",
    "shortfall",
]

EPS = 1e-15
"""Probabilities are clipped to [EPS, 1 - EPS] for log loss (a 0 or 1 would be infinite)."""


def prediction_metrics(
    kind: str, labels: Sequence[float], preds: Sequence[float]
) -> dict[str, Any]:
    """Every metric of the task kind, by scikit-learn; AUROC is None when one class is absent."""
    from sklearn import metrics  # imported when a prediction is scored, not at collection

    if kind == "regression":
        return {"n": len(labels), "mae": float(metrics.mean_absolute_error(labels, preds))}
    y = [int(v) for v in labels]
    p = [min(max(float(v), EPS), 1.0 - EPS) for v in preds]
    both = len(set(y)) == 2
    return {
        "n": len(y),
        "prevalence": sum(y) / len(y) if y else None,
        "auroc": float(metrics.roc_auc_score(y, p)) if both else None,
        "average_precision": float(metrics.average_precision_score(y, p)) if 1 in y else None,
        "log_loss": float(metrics.log_loss(y, p, labels=[0, 1])),
        "brier": float(metrics.brier_score_loss(y, p, pos_label=1)),
    }


@dataclass(frozen=True)
class Criterion:
    text: str
    value: float | None
    bound: float | None
    ok: bool


def check_criteria(
    spec: PredictionSpec, model: Mapping[str, Any], baseline: Mapping[str, Any]
) -> list[Criterion]:
    """Each declared criterion with the model's value and the bound from the baseline."""
    out = []
    for text in spec.criteria:
        match = CRITERION.match(text)
        assert match is not None  # validated with the scenario
        name = match["metric"]
        margin = float(match["margin"] or 0.0) * (-1.0 if match["sign"] == "-" else 1.0)
        value, base = model.get(name), baseline.get(name)
        if value is None or base is None:
            out.append(Criterion(text, value, None, False))
            continue
        bound = float(base) + margin
        ok = value >= bound if match["op"] == ">=" else value <= bound
        out.append(Criterion(text, float(value), bound, bool(ok) and math.isfinite(value)))
    return out


def hidden_cohort(reference: Mapping[str, Any]) -> tuple[list[str], list[float], list[float]]:
    """The scoring cohort's entities, hidden labels and baseline predictions."""
    rows = reference.get("cohort")
    if not isinstance(rows, list) or not rows:
        raise ValueError("the reference has no scoring cohort (`cohort` rows)")
    ids = [str(r["entity"]) for r in rows]
    return ids, [float(r["label"]) for r in rows], [float(r["baseline"]) for r in rows]


def _assess(
    spec: PredictionSpec, predictions: Mapping[str, float], reference: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], list[Criterion]]:
    ids, labels, baseline = hidden_cohort(reference)
    model = prediction_metrics(spec.kind, labels, [predictions[i] for i in ids])
    base = prediction_metrics(spec.kind, labels, baseline)
    return model, base, check_criteria(spec, model, base)


def shortfall(scenario: Scenario, printed: Mapping[str, Any], reference: Mapping[str, Any]) -> str:
    """'' when a program's printed predictions meet every criterion of `scenario` against the
    hidden labels of `reference`, else what falls short (how a reference program is checked)."""
    spec = scenario.prediction
    assert spec is not None
    preds, problems = prediction_rows(spec, printed.get(scenario.metrics[0].name))
    ids, _, _ = hidden_cohort(reference)
    if problems or set(ids) - set(preds):
        return "; ".join(problems[:3]) or "it does not predict every scoring entity"
    _, _, criteria = _assess(spec, preds, reference)
    return "; ".join(f"{c.text}: {c.value} against {c.bound}" for c in criteria if not c.ok)


def _fmt(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.4f}"


_WHAT = {
    "labels": "with the training labels permuted",
    "features": "with the scoring features shuffled between entities",
}


def _unsupported(run: PermutedRun, why: str) -> Reason:
    return Reason(Outcome.UNSUPPORTED_EVIDENCE, f"evidence {run.evidence_id}: {why}")


def _rerun_reasons(
    spec: PredictionSpec,
    run: PermutedRun | None,
    reference: Mapping[str, Any],
    reported: Mapping[str, float],
) -> tuple[list[Reason], dict[str, Any] | None]:
    """The rule of one re-run on a shuffled copy (`run.check`): it must run and predict every
    scoring entity, and must not meet every criterion (keep its edge); on shuffled features its
    predictions must also move (at least one by more than the tolerance)."""
    if run is None:
        return [], None
    what = _WHAT[run.check]
    record: dict[str, Any] = run.to_json()
    if run.error is not None:
        return [_unsupported(run, f"{what}, the program failed: {run.error}")], record
    ids, _, _ = hidden_cohort(reference)
    if set(ids) - set(run.predictions):
        return [_unsupported(run, f"{what}, the program no longer predicts every entity")], record
    reasons: list[Reason] = []
    if run.check == "features" and reported:
        moved = sum(
            1
            for e in ids
            if e in reported and abs(run.predictions[e] - reported[e]) > spec.tolerance
        )
        record["moved"] = moved
        if moved == 0:
            reasons.append(
                _unsupported(
                    run,
                    f"{what}, not one of the {len(ids)} predictions moved: they do not depend on "
                    "the features (hard-coded per entity)",
                )
            )
    model, _, criteria = _assess(spec, run.predictions, reference)
    record |= {"metrics": model, "criteria_met": all(c.ok for c in criteria)}
    if all(c.ok for c in criteria) and not reasons:
        reasons.append(
            _unsupported(
                run,
                f"re-run {what}, the program still meets every criterion against the baseline ("
                + "; ".join(f"{c.text}: {_fmt(c.value)}" for c in criteria)
                + "): its predictions do not come from the training data and the features "
                "(hard-coded or leaked)",
            )
        )
    return reasons, record


def score_prediction(
    scenario: Scenario,
    output: AnalystAnswer,
    evidence: list[EvidenceResult],
    reference: Mapping[str, Any],
    permuted: PermutedRun | None,
    perturbed: PermutedRun | None = None,
) -> TrialScore:
    """Score a prediction answer: metrics and criteria against the hidden labels, evidence
    reproduced and cited as Python, and the re-runs on permuted training labels (`permuted`)
    and on shuffled scoring features (`perturbed`)."""
    spec = scenario.prediction
    assert spec is not None
    name = scenario.metrics[0].name
    given = [m for m in output.metrics if m.name == name]
    if not given or given[0].value is None:
        why = "not reported" if not given else "reported as null"
        return TrialScore.from_reasons([Reason(Outcome.MISSING_METRIC, f"{name} is {why}", name)])
    reasons: list[Reason] = []
    if len(given) > 1:
        reasons.append(Reason(Outcome.DUPLICATE_METRIC, f"{name} is reported {len(given)} times"))
    predictions, problems = prediction_rows(spec, given[0].value)
    ids, _, _ = hidden_cohort(reference)
    missing, extra = sorted(set(ids) - set(predictions)), sorted(set(predictions) - set(ids))
    if missing:
        problems.append(f"{len(missing)} scoring {spec.entity}s have no prediction {missing[:3]}")
    if extra:
        problems.append(f"{len(extra)} {spec.entity}s are not in the scoring cohort {extra[:3]}")
    record: dict[str, Any] = {"kind": spec.kind, "criteria": list(spec.criteria)}
    if problems:
        reasons += [Reason(Outcome.WRONG_VALUE, f"{name}: {p}", name) for p in problems]
    else:
        model, base, criteria = _assess(spec, predictions, reference)
        record |= {"metrics": model, "baseline": base}
        record["checks"] = [
            {"criterion": c.text, "value": c.value, "bound": c.bound, "ok": c.ok} for c in criteria
        ]
        for c in criteria:
            if not c.ok:
                reasons.append(
                    Reason(
                        Outcome.WRONG_VALUE,
                        f"{name}: criterion {c.text!r} not met: {_fmt(c.value)} against a bound "
                        f"of {_fmt(c.bound)} from the baseline ({spec.baseline})",
                        name,
                    )
                )
    cited = [e for e in evidence if name in e.cited]
    if not any(e.kind == "python" for e in cited):
        reasons.append(
            Reason(
                Outcome.UNSUPPORTED_EVIDENCE,
                f"no Python evidence cites {name}: the program that trained and predicted must "
                "be cited so it can be re-run",
                name,
            )
        )
    reasons += evidence_reasons(evidence)
    for key, run in (("permuted", permuted), ("perturbed", perturbed)):
        more, record[key] = _rerun_reasons(spec, run, reference, predictions)
        reasons += more
    score = TrialScore.from_reasons(reasons)
    return TrialScore(score.outcome, score.reasons, score.checks, prediction=record)
