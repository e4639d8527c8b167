"""Prediction scenarios (level 8): split checks at build time, scikit-learn scoring against the
baseline, and, end to end through the plugin, the calibration analysts and a literal predictor
caught by the training-label permutation."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import sklearn.metrics  # noqa: F401  # before pytester snapshots sys.modules (numpy loads once)
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from pytest_backintel.cli import main
from pytest_backintel.collect.loading import DEFINITIONS_DIR, find_scenarios
from pytest_backintel.contract import AnalystAnswer, Evidence, MetricValue
from pytest_backintel.evidence.prediction import PermutedRun
from pytest_backintel.evidence.predictions_table import prediction_rows
from pytest_backintel.evidence.reexecute import EvidenceResult
from pytest_backintel.sandbox.bwrap import BwrapProvider
from pytest_backintel.sandbox.subprocess_backend import SubprocessProvider
from pytest_backintel.scenario import PredictionSpec, Scenario
from pytest_backintel.scoring.prediction import score_prediction
from scenarios.predict.tasks import TASKS
from scenarios.predict.world import (
    OlistPredictWorld,
    SplitError,
    Window,
    check_no_leak,
    check_split,
    split_cohorts,
)
from scenarios.references import REFERENCES_DIR

LEVEL8 = DEFINITIONS_DIR / "level8"
PREDICTION = {
    k: v for k, v in find_scenarios(DEFINITIONS_DIR).items() if v[1].prediction is not None
}


def cohort(rows: list[tuple[str, str, datetime, datetime]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["entity", "group", "at", "label_at"], orient="row")


def test_a_person_on_both_sides_of_a_split_is_a_build_error_naming_the_scenario() -> None:
    training = cohort([("o1", "alice", datetime(2017, 5, 1), datetime(2017, 5, 20))])
    scoring = cohort(
        [
            ("o2", "alice", datetime(2018, 4, 2), datetime(2018, 4, 20)),
            ("o3", "bob", datetime(2018, 4, 3), datetime(2018, 4, 21)),
        ]
    )
    with pytest.raises(SplitError, match=r"scenario 'l8-mine'.*both sides.*'alice'"):
        check_split("l8-mine", training, scoring)
    check_split("l8-mine", training, scoring.filter(pl.col("group") != "alice"))


def test_a_scoring_period_before_the_training_period_is_a_build_error_naming_it() -> None:
    frame = cohort(
        [
            ("o1", "alice", datetime(2017, 2, 1), datetime(2017, 2, 15)),
            ("o2", "bob", datetime(2018, 2, 1), datetime(2018, 2, 15)),
        ]
    ).with_columns(label=pl.lit(1))
    backwards = Window(
        train_from=datetime(2018, 1, 1),
        train_to=datetime(2018, 6, 1),
        score_from=datetime(2017, 1, 1),
        score_to=datetime(2017, 6, 1),
    )
    with pytest.raises(SplitError, match=r"scenario 'l8-backwards': time order broken"):
        split_cohorts("l8-backwards", frame, backwards)
    forwards = Window(datetime(2017, 1, 1), datetime(2018, 1, 1), datetime(2018, 6, 1))
    split = split_cohorts("l8-forwards", frame, forwards)
    assert split.training["entity"].to_list() == ["o1"]
    assert split.scoring["entity"].to_list() == ["o2"]


def test_a_label_known_only_after_scoring_starts_keeps_the_entity_out_of_training() -> None:
    frame = cohort([("o1", "a", datetime(2018, 3, 30), datetime(2018, 4, 10))])
    frame = pl.concat([frame, cohort([("o2", "b", datetime(2018, 4, 2), datetime(2018, 4, 9))])])
    with pytest.raises(SplitError, match=r"scenario 'l8-x': empty cohort \(training 0 rows"):
        split_cohorts("l8-x", frame)


def test_a_scoring_label_that_reaches_the_store_is_a_build_error() -> None:
    task = TASKS[0]
    scoring = pl.DataFrame({"entity": ["s1"]})
    clean = {
        f"{task.name}_training": pl.DataFrame({"order_id": ["t1"], task.target: [1]}),
        f"{task.name}_scoring": pl.DataFrame({"order_id": ["s1"]}),
    }
    check_no_leak("l8-late-delivery", task, scoring, clean)
    labelled = {**clean, f"{task.name}_scoring": clean[f"{task.name}_scoring"].with_columns(late=1)}
    with pytest.raises(SplitError, match=r"scenario 'l8-late-delivery'.*holds the label"):
        check_no_leak("l8-late-delivery", task, scoring, labelled)
    in_training = {
        **clean,
        f"{task.name}_training": pl.DataFrame({"order_id": ["t1", "s1"], task.target: [1, 0]}),
    }
    with pytest.raises(SplitError, match=r"late_delivery_training holds the label 'late' of 1"):
        check_no_leak("l8-late-delivery", task, scoring, in_training)


def test_every_task_builds_without_labels_in_its_scoring_table() -> None:
    world = OlistPredictWorld()
    assert len(PREDICTION) >= 8
    for task in TASKS:
        tables = world.generate(task.name)
        training, scoring = tables[f"{task.name}_training"], tables[f"{task.name}_scoring"]
        assert task.target in training.columns
        assert task.target not in scoring.columns
        assert 300 <= scoring.height <= 600, "the predictions fit in one evidence output"
        hidden = world.hidden_cohort(f"{task.name}_training", "median")
        assert [r["entity"] for r in hidden] == scoring["order_id"].to_list()


def test_prediction_specs_reject_a_criterion_they_cannot_check() -> None:
    base = {
        "kind": "classification",
        "entity": "order_id",
        "value": "probability",
        "training_table": "t_training",
        "scoring_table": "t_scoring",
        "target": "late",
        "baseline": "prevalence",
    }
    PredictionSpec.model_validate({**base, "criteria": ["auroc >= baseline + 0.05"]})
    for bad in ("mae <= baseline", "auroc > baseline", "accuracy >= baseline", "auroc >= 0.7"):
        with pytest.raises(ValidationError, match="criterion"):
            PredictionSpec.model_validate({**base, "criteria": [bad]})
    with pytest.raises(ValidationError, match="baseline is one of"):
        PredictionSpec.model_validate(
            {**base, "baseline": "median", "criteria": ["brier <= baseline"]}
        )


json_values = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(json_values)
def test_any_predictions_value_is_read_or_refused_never_a_crash(value: Any) -> None:
    spec = PREDICTION["l8-late-delivery"][1].prediction
    assert spec is not None
    rows, problems = prediction_rows(spec, value)
    assert all(0.0 <= p <= 1.0 for p in rows.values())
    assert rows or problems or value == []


# -- scoring against a small hidden cohort -------------------------------------------------

LABELS = [1, 0, 1, 0, 0, 0, 1, 0]
REFERENCE = {
    "cohort": [
        {"entity": f"o{i}", "label": float(y), "baseline": 0.375} for i, y in enumerate(LABELS)
    ]
}
GOOD = [0.9, 0.1, 0.8, 0.2, 0.15, 0.1, 0.7, 0.3]


def scenario() -> Scenario:
    return PREDICTION["l8-late-delivery"][1]


def answer(values: list[float] | Any, evidence_kind: str = "python") -> AnalystAnswer:
    rows = (
        [{"order_id": f"o{i}", "probability": v} for i, v in enumerate(values)]
        if isinstance(values, list)
        else values
    )
    return AnalystAnswer(
        metrics=[MetricValue(name="predictions", value=rows, unit="probability")],
        evidence=[Evidence(id="e1", kind=evidence_kind, code="...", metrics=["predictions"])],
    )


def reproduced(kind: str = "python", ok: bool = True) -> list[EvidenceResult]:
    return [
        EvidenceResult("e1", kind, "...", ["predictions"], ran=True, reproduced={"predictions": ok})
    ]


def permuted(values: list[float]) -> PermutedRun:
    return PermutedRun("e1", {f"o{i}": v for i, v in enumerate(values)})


def test_good_predictions_pass_and_every_metric_is_reported_on_its_own() -> None:
    score = score_prediction(
        scenario(), answer(GOOD), reproduced(), REFERENCE, permuted([0.375] * 8)
    )
    assert score.outcome.value == "pass", score.reasons
    assert score.prediction is not None
    metrics = score.prediction["metrics"]
    assert set(metrics) == {"n", "prevalence", "auroc", "average_precision", "log_loss", "brier"}
    assert metrics["auroc"] == 1.0
    assert metrics["prevalence"] == 0.375
    assert score.prediction["baseline"]["auroc"] == 0.5
    assert [c["ok"] for c in score.prediction["checks"]] == [True, True]


@pytest.mark.parametrize(
    ("values", "outcome", "why"),
    [
        (GOOD[::-1], "wrong_value", "criterion 'auroc >= baseline + 0.1' not met"),
        ([0.375] * 8, "wrong_value", "not met"),
        (GOOD[:-1], "wrong_value", "1 scoring order_ids have no prediction"),
        ([*GOOD[:-1], 1.5], "wrong_value", "outside [0, 1]"),
        ("all of them", "wrong_value", "must be a list of rows"),
    ],
)
def test_wrong_predictions_fail(values: Any, outcome: str, why: str) -> None:
    score = score_prediction(scenario(), answer(values), reproduced(), REFERENCE, None)
    assert score.outcome.value == outcome
    assert any(why in r.message for r in score.reasons), score.reasons


def test_predictions_without_their_python_program_are_unsupported() -> None:
    score = score_prediction(scenario(), answer(GOOD, "sql"), reproduced("sql"), REFERENCE, None)
    assert score.outcome.value == "unsupported_evidence"
    assert "no Python evidence cites predictions" in score.reasons[0].message


def test_a_program_that_keeps_its_edge_with_permuted_labels_is_unsupported() -> None:
    score = score_prediction(scenario(), answer(GOOD), reproduced(), REFERENCE, permuted(GOOD))
    assert score.outcome.value == "unsupported_evidence"
    assert "still meets every criterion" in score.reasons[0].message
    assert score.prediction is not None
    assert score.prediction["permuted"]["criteria_met"] is True


def test_a_program_that_fails_on_permuted_labels_is_unsupported() -> None:
    crashed = PermutedRun("e1", error="ValueError: only one class")
    score = score_prediction(scenario(), answer(GOOD), reproduced(), REFERENCE, crashed)
    assert score.outcome.value == "unsupported_evidence"
    assert "the program failed: ValueError" in score.reasons[0].message


@pytest.mark.parametrize("backend", [BwrapProvider, SubprocessProvider])
def test_scikit_learn_trains_in_every_sandbox_backend(
    backend: type[BwrapProvider | SubprocessProvider], tmp_path: Path
) -> None:
    code = (
        "import json\n"
        "from sklearn.linear_model import LogisticRegression\n"
        "m = LogisticRegression(random_state=0).fit([[0.0], [1.0], [2.0], [3.0]], [0, 0, 1, 1])\n"
        "print(json.dumps({'p': bool(m.predict_proba([[3.0]])[0][1] > 0.5)}))\n"
    )
    with backend(tmp_path / "sandbox") as provider, provider.open(None, tmp_path) as sandbox:
        result = sandbox.exec(code)
    assert result.ok, result.stderr
    assert json.loads(result.stdout) == {"p": True}


# -- end to end through the plugin ----------------------------------------------------------


def run_bench(pytester: pytest.Pytester, *args: str, run_id: str) -> dict[str, dict[str, Any]]:
    results = pytester.path / "results"
    pytester.runpytest_subprocess(
        str(LEVEL8), "-m", "development and prediction", "--results-dir", str(results),
        "--run-id", run_id, "-p", "no:cacheprovider", *args,
    )  # fmt: skip
    lines = (results / run_id / "records.jsonl").read_text().splitlines()
    return {r["scenario_id"]: r for r in map(json.loads, lines)}


@pytest.mark.parametrize(
    ("analyst", "expected"),
    [
        ("reference", "pass"),
        ("perturbed", "wrong_value"),
        ("unsupported", "unsupported_evidence"),
    ],
)
def test_calibration_analysts_meet_or_fail_every_prediction_scenario_as_designed(
    pytester: pytest.Pytester, analyst: str, expected: str
) -> None:
    records = run_bench(pytester, "--analyst", analyst, "-n", "2", run_id=analyst)
    assert set(records) == set(PREDICTION)
    assert {r["outcome"] for r in records.values()} == {expected}, {
        k: (r["outcome"], r["reasons"][:1]) for k, r in records.items()
    }
    if analyst == "reference":  # every criterion met, and the edge lost on both copies
        for record in records.values():
            prediction = record["prediction"]
            assert prediction["checks"], record["scenario_id"]
            assert all(c["ok"] for c in prediction["checks"]), record["scenario_id"]
            assert prediction["permuted"]["criteria_met"] is False
            assert prediction["perturbed"]["criteria_met"] is False
            assert prediction["perturbed"]["moved"] > 0


LITERAL = '''
import json
from pytest_backintel.analyst_api import AnalystRun
from pytest_backintel.contract import AnalystAnswer, Evidence, MetricValue

LEAKED = {leaked!r}
CODE = """
import json
import backintel_store as bs

LEAKED = %r
score = bs.table("late_delivery_scoring")
rows = [{{"order_id": o, "probability": LEAKED[o]}} for o in score["order_id"].to_list()]
print(json.dumps({{"predictions": rows}}))
""" % (LEAKED,)

class Literal:
    name, kind = "literal", "custom"
    def answer(self, task):
        rows = [{{"order_id": o, "probability": p}} for o, p in sorted(LEAKED.items())]
        return AnalystRun(output=AnalystAnswer(
            metrics=[MetricValue(name="predictions", value=rows, unit="probability")],
            evidence=[Evidence(id="e1", kind="python", code=CODE, metrics=["predictions"])],
            method="hard-coded from a leaked file",
        ))

def literal(config):
    return Literal()
'''


def test_predictions_hard_coded_from_the_hidden_labels_are_caught_by_the_permutation(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    refs = json.loads((REFERENCES_DIR / "olist-predict-late_delivery.json").read_text())
    rows = refs["references"]["l8-late-delivery"]["values"]["cohort"]
    leaked = {r["entity"]: (0.9 if r["label"] else 0.02) for r in rows}
    pytester.makepyfile(literal_agent=LITERAL.format(leaked=leaked))
    records = run_bench(
        pytester, "--analyst", "literal_agent:literal", "-k", "l8-late-delivery", run_id="lit"
    )
    record = records["l8-late-delivery"]
    assert record["outcome"] == "unsupported_evidence", record["reasons"]
    assert [r["outcome"] for r in record["reasons"]] == ["unsupported_evidence"] * 2
    assert "with the training labels permuted" in record["reasons"][0]["message"]
    assert "not one of the 470 predictions moved" in record["reasons"][1]["message"]
    assert record["evidence"][0]["reproduced"] == {"predictions": True}
    prediction = record["prediction"]
    assert prediction["metrics"]["auroc"] == 1.0, "the literal predictions are perfect"
    assert all(c["ok"] for c in prediction["checks"])
    assert prediction["permuted"]["criteria_met"] is True
    assert prediction["perturbed"]["moved"] == 0
    # backintel score equals the trial: the permutation check runs there too
    assert main(["score", "--run", str(pytester.path / "results" / "lit")]) == 1
    assert "1 recorded answers scored again: 1 agree with the trial" in capsys.readouterr().out


def test_backintel_score_agrees_with_a_passing_prediction_trial(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    records = run_bench(pytester, "-k", "l8-order-value", run_id="ref")
    assert records["l8-order-value"]["outcome"] == "pass", records["l8-order-value"]["reasons"]
    assert main(["score", "--run", str(pytester.path / "results" / "ref")]) == 0
    out = capsys.readouterr().out
    assert "1 recorded answers scored again: 1 agree with the trial; 1 pass, 0 fail" in out
