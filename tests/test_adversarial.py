"""The adversarial suite: for every shipped case, the reference answer passes and every mutant
of it (wrong values, wrong types, duplicate and missing metrics, literal evidence, evidence
that reads no table or writes, refusals that name nothing, repeat the question or state the
forbidden value) gets exactly the outcome it deserves, through `backintel score`'s scorer.

Every case runs on SQLite (levels 4 and 7 on their bound stores); the cases of the issue's
must-show list also run on DuckDB and PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from adversarial import all_cases, mutants

from pytest_backintel.cli import main
from pytest_backintel.hand_score import HandScorer
from scenarios.worlds import data_dir

CASES = all_cases()
MUST_SHOW = ["l1-delivered-orders", "acc-dev-zero-profit", "l1-orders-by-status"]


@pytest.fixture(scope="module", params=["sqlite", "duckdb", "postgres"])
def scorer(request: pytest.FixtureRequest) -> Iterator[HandScorer]:
    hand = HandScorer(data_dir(), store=request.param)
    yield hand
    hand.close()


def _check(scorer: HandScorer, case_id: str) -> list[str]:
    case = CASES[case_id]
    store, dialect = scorer.store(case.scenario)
    wrong = []
    for mutant in mutants(scorer, case, store, dialect):
        score, _ = scorer.score(case.scenario, mutant.output, case.manifest)
        if score.outcome.value != mutant.expected:
            reasons = "; ".join(r.message[:200] for r in score.reasons)
            wrong.append(
                f"{mutant.label}: {score.outcome.value}, not {mutant.expected} ({reasons})"
            )
    return wrong


@pytest.mark.parametrize("case_id", list(CASES))
def test_every_case_passes_its_reference_and_rejects_every_mutant(
    scorer: HandScorer, case_id: str
) -> None:
    if scorer.default_store != "sqlite" and case_id not in MUST_SHOW:
        pytest.skip("every case runs on SQLite; the must-show cases on every backend")
    assert _check(scorer, case_id) == []


def test_a_refusal_repeating_the_question_fails_every_unanswerable_case() -> None:
    from pytest_backintel.contract import Refusal
    from pytest_backintel.scoring import score_answer

    unanswerable = [c.scenario for c in CASES.values() if not c.scenario.answerable]
    assert len(unanswerable) == 26
    for scenario in unanswerable:
        echo = Refusal(missing=[scenario.question], explanation=scenario.question)
        assert score_answer(scenario, echo, [], {}).outcome.value == "unhelpful_refusal"


@pytest.mark.parametrize("store", ["sqlite", "duckdb", "postgres"])
def test_backintel_score_rejects_literal_evidence_and_accepts_the_reference(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    literal = {
        "metrics": [{"name": "delivered_orders", "value": 3715, "unit": "orders"}],
        "evidence": [
            {
                "id": "e1",
                "kind": "sql",
                "code": "SELECT 3715 AS delivered_orders",
                "metrics": ["delivered_orders"],
            }
        ],
    }
    path = tmp_path / "answer.json"
    path.write_text(json.dumps({"status": "answered", **literal}))
    assert main(["score", "--case", "l1-delivered-orders", "--store", store, str(path)]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "unsupported_evidence"
    assert "reads no table" in out["reasons"][0]
