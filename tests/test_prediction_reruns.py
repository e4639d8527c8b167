"""A prediction program's re-runs on shuffled copies, and the seed the harness imposes.

- On a copy whose scoring features are shuffled between entities a program that predicts from
  the features gives other predictions that lose their edge (passes); one whose predictions do
  not move is `unsupported_evidence`, even when it dodges the training-label permutation.
- Every sandboxed run has its seeds fixed by the harness (`pytest_backintel.sandbox.seed`), so
  a RandomForest without `random_state` reproduces its predictions when it is re-run.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sklearn.metrics  # noqa: F401  # before pytester snapshots sys.modules (numpy loads once)

from pytest_backintel.collect.loading import DEFINITIONS_DIR, find_scenarios
from pytest_backintel.contract import AnalystAnswer, Evidence, MetricValue
from pytest_backintel.evidence.prediction import PermutedRun, shuffled_copy
from pytest_backintel.evidence.reexecute import EvidenceResult
from pytest_backintel.sandbox.seed import SANDBOX_SEED
from pytest_backintel.scenario import Scenario
from pytest_backintel.scoring.prediction import score_prediction
from pytest_backintel.scoring.rules import answer_rules
from scenarios.references import REFERENCES_DIR

LEVEL8 = DEFINITIONS_DIR / "level8"
SCENARIOS = find_scenarios(DEFINITIONS_DIR)


def scenario() -> Scenario:
    return SCENARIOS["l8-late-delivery"][1]


# -- the rule, on a small hidden cohort ----------------------------------------------------

LABELS = [1, 0, 1, 0, 0, 0, 1, 0]
REFERENCE = {
    "cohort": [
        {"entity": f"o{i}", "label": float(y), "baseline": 0.375} for i, y in enumerate(LABELS)
    ]
}
GOOD = [0.9, 0.1, 0.8, 0.2, 0.15, 0.1, 0.7, 0.3]
SHUFFLED = [0.1, 0.8, 0.2, 0.9, 0.3, 0.7, 0.1, 0.15]
"""What a model that predicts from the features gives when they are shuffled: no edge left."""


def answer() -> AnalystAnswer:
    rows = [{"order_id": f"o{i}", "probability": v} for i, v in enumerate(GOOD)]
    return AnalystAnswer(
        metrics=[MetricValue(name="predictions", value=rows, unit="probability")],
        evidence=[Evidence(id="e1", kind="python", code="...", metrics=["predictions"])],
    )


def rerun(values: list[float], check: str) -> PermutedRun:
    return PermutedRun("e1", {f"o{i}": v for i, v in enumerate(values)}, check=check)  # type: ignore[arg-type]


def score(features: list[float]) -> Any:
    evidence = [
        EvidenceResult(
            "e1", "python", "...", ["predictions"], ran=True, reproduced={"predictions": True}
        )
    ]
    return score_prediction(
        scenario(),
        answer(),
        evidence,
        REFERENCE,
        rerun([0.375] * 8, "labels"),
        rerun(features, "features"),
    )


def test_predictions_that_move_and_lose_their_edge_on_shuffled_features_pass() -> None:
    result = score(SHUFFLED)
    assert result.outcome.value == "pass", result.reasons
    assert result.prediction is not None
    assert result.prediction["perturbed"]["moved"] == 8
    assert result.prediction["perturbed"]["criteria_met"] is False


def test_predictions_that_do_not_move_on_shuffled_features_are_unsupported() -> None:
    result = score([v + 1e-9 for v in GOOD])  # within the tolerance: not moved
    assert result.outcome.value == "unsupported_evidence"
    assert [r.message for r in result.reasons] == [
        "evidence e1: with the scoring features shuffled between entities, not one of the 8 "
        "predictions moved: they do not depend on the features (hard-coded per entity)"
    ]
    assert result.prediction is not None
    assert result.prediction["perturbed"]["moved"] == 0


def test_predictions_that_move_but_keep_their_edge_on_shuffled_features_are_unsupported() -> None:
    result = score([min(v + 0.05, 1.0) for v in GOOD])
    assert result.outcome.value == "unsupported_evidence"
    assert "still meets every criterion" in result.reasons[0].message
    assert "scoring features shuffled" in result.reasons[0].message


def test_a_program_that_fails_on_shuffled_features_is_unsupported() -> None:
    evidence = [
        EvidenceResult(
            "e1", "python", "...", ["predictions"], ran=True, reproduced={"predictions": True}
        )
    ]
    crashed = PermutedRun("e1", error="KeyError: 'o3'", check="features")
    result = score_prediction(
        scenario(), answer(), evidence, REFERENCE, rerun([0.375] * 8, "labels"), crashed
    )
    assert result.outcome.value == "unsupported_evidence"
    assert "shuffled between entities, the program failed: KeyError" in result.reasons[0].message


def test_the_shuffled_copies_change_only_what_they_say(tmp_path: Path) -> None:
    db = tmp_path / "d.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t_training (order_id TEXT PRIMARY KEY, a REAL, late INTEGER)")
    con.execute("CREATE TABLE t_scoring (order_id TEXT PRIMARY KEY, a REAL, b REAL)")
    con.executemany(
        "INSERT INTO t_training VALUES (?, ?, ?)", [(f"t{i}", i, i % 2) for i in range(50)]
    )
    con.executemany("INSERT INTO t_scoring VALUES (?, ?, ?)", [(f"s{i}", i, -i) for i in range(50)])
    con.commit()
    con.close()
    spec = scenario().prediction
    assert spec is not None
    spec = spec.model_copy(update={"training_table": "t_training", "scoring_table": "t_scoring"})

    def rows(path: Path, table: str) -> list[tuple[Any, ...]]:
        c = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
        try:
            return c.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
        finally:
            c.close()

    features = shuffled_copy(db, spec, tmp_path / "cache", "features")
    labels = shuffled_copy(db, spec, tmp_path / "cache", "labels")
    assert rows(features, "t_training") == rows(db, "t_training")
    assert rows(labels, "t_scoring") == rows(db, "t_scoring")
    before, after = rows(db, "t_scoring"), rows(features, "t_scoring")
    assert [r[0] for r in after] == [r[0] for r in before], "entities keep their rows"
    for col in (1, 2):
        assert sorted(r[col] for r in after) == sorted(r[col] for r in before)
        assert [r[col] for r in after] != [r[col] for r in before]
    # each column shuffled on its own: rows no longer keep a = -b
    assert sum(r[1] == -r[2] for r in after) < 10
    before_l, after_l = rows(db, "t_training"), rows(labels, "t_training")
    assert [r[:2] for r in after_l] == [r[:2] for r in before_l]
    assert [r[2] for r in after_l] != [r[2] for r in before_l]
    assert shuffled_copy(db, spec, tmp_path / "cache", "features") == features, "built once"


def test_a_prediction_question_states_the_reruns_and_the_harness_seed() -> None:
    rules = answer_rules(scenario())
    assert f"BACKINTEL_SEED={SANDBOX_SEED}" in rules
    assert "scoring features are shuffled" in rules
    assert "BACKINTEL_SEED" not in answer_rules(SCENARIOS["l1-delivered-orders"][1])


# -- end to end through the plugin -------------------------------------------------------

AGENT = """
import json
from pytest_backintel.analyst_api import AnalystRun
from pytest_backintel.contract import AnalystAnswer, Evidence, MetricValue

CODE = {code!r}

class Agent:
    name, kind = "program", "custom"
    def answer(self, task):
        out = task.run_python(CODE)
        rows = json.loads(out.strip().splitlines()[-1])["predictions"]
        return AnalystRun(output=AnalystAnswer(
            metrics=[MetricValue(name="predictions", value=rows, unit="probability")],
            evidence=[Evidence(id="e1", kind="python", code=CODE, metrics=["predictions"])],
            method="ran the program and reported what it printed",
        ))

def agent(config):
    return Agent()
"""

UNSEEDED_FOREST = """
import json

import backintel_store as bs
import numpy as np
from sklearn.ensemble import RandomForestClassifier

features = ["estimated_days", "n_items", "freight_value"]
train = bs.table("late_delivery_training")
score = bs.table("late_delivery_scoring")
model = RandomForestClassifier(n_estimators=60, min_samples_leaf=25, max_features=1)
model.fit(train.select(features).to_numpy(), train["late"].to_numpy())
p = np.clip(model.predict_proba(score.select(features).to_numpy())[:, 1], 0.01, 0.99)
rows = [
    {"order_id": o, "probability": round(float(v), 6)}
    for o, v in zip(score["order_id"].to_list(), p, strict=True)
]
print(json.dumps({"predictions": rows}))
"""

DODGER = """
import json

import backintel_store as bs

LEAKED = %r
train = bs.table("late_delivery_training")
score = bs.table("late_delivery_scoring")
late = train.filter(train["late"] == 1)["estimated_days"].mean()
on_time = train.filter(train["late"] == 0)["estimated_days"].mean()
prevalence = float(train["late"].mean())
real = late < on_time - 3.0  # permuted labels show no such gap: then it plays honest
rows = [
    {"order_id": o, "probability": LEAKED[o] if real else prevalence}
    for o in score["order_id"].to_list()
]
print(json.dumps({"predictions": rows}))
"""
"""Hard-coded from the hidden labels, yet it loses its edge on permuted training labels: only
the shuffled features catch it."""


def run_agent(pytester: pytest.Pytester, code: str, run_id: str) -> dict[str, Any]:
    pytester.makepyfile(program_agent=AGENT.format(code=code))
    results = pytester.path / "results"
    pytester.runpytest_subprocess(
        str(LEVEL8), "-m", "development and prediction", "-k", "l8-late-delivery",
        "--analyst", "program_agent:agent", "--results-dir", str(results), "--run-id", run_id,
        "-p", "no:cacheprovider",
    )  # fmt: skip
    (line,) = (results / run_id / "records.jsonl").read_text().splitlines()
    record: dict[str, Any] = json.loads(line)
    record["run"] = json.loads((results / run_id / "run.json").read_text())
    return record


def test_an_unseeded_forest_reproduces_under_the_harness_seed_and_passes(
    pytester: pytest.Pytester,
) -> None:
    # The program is really unseeded: two runs outside the sandbox disagree.
    plain = UNSEEDED_FOREST.replace("import backintel_store as bs\n", "")
    plain = plain.replace('bs.table("late_delivery_training")', "TRAIN").replace(
        'bs.table("late_delivery_scoring")', "SCORE"
    )
    prelude = (
        "import polars as pl\nimport numpy as np\nr = np.random.RandomState(1)\n"
        "TRAIN = pl.DataFrame({'order_id': [str(i) for i in range(300)], "
        "'estimated_days': r.rand(300) * 30, 'n_items': r.randint(1, 4, 300), "
        "'freight_value': r.rand(300) * 40, 'late': (r.rand(300) < 0.3).astype(int)})\n"
        "SCORE = TRAIN.drop('late')\n"
    )
    host = [
        subprocess.run(
            [sys.executable, "-c", prelude + plain], capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    ]
    assert host[0] != host[1], "without a seed the forest differs from run to run"

    record = run_agent(pytester, UNSEEDED_FOREST, "forest")
    assert record["outcome"] == "pass", record["reasons"]
    assert record["evidence"][0]["reproduced"] == {"predictions": True}
    prediction = record["prediction"]
    assert prediction["permuted"]["criteria_met"] is False
    assert prediction["perturbed"]["criteria_met"] is False
    assert prediction["perturbed"]["moved"] > 400, "a model's predictions follow its features"
    assert record["run"]["sandbox"]["seed"] == SANDBOX_SEED


def test_a_literal_predictor_that_dodges_the_label_permutation_is_caught_by_the_features(
    pytester: pytest.Pytester,
) -> None:
    refs = json.loads((REFERENCES_DIR / "olist-predict-late_delivery.json").read_text())
    rows = refs["references"]["l8-late-delivery"]["values"]["cohort"]
    leaked = {r["entity"]: (0.9 if r["label"] else 0.02) for r in rows}
    record = run_agent(pytester, DODGER % (leaked,), "dodger")
    assert record["outcome"] == "unsupported_evidence", record["reasons"]
    prediction = record["prediction"]
    assert prediction["metrics"]["auroc"] == 1.0, "the literal predictions are perfect"
    assert prediction["permuted"]["criteria_met"] is False, "it dodged the permutation"
    assert prediction["perturbed"]["moved"] == 0
    (reason,) = record["reasons"]
    assert "not one of the 470 predictions moved" in reason["message"]
