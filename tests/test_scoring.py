"""The scorer passes a right answer and fails every kind of wrong one with the right outcome."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_backintel.contract import AnalystAnswer, Evidence, MetricValue, Refusal
from pytest_backintel.evidence.reexecute import EvidenceResult
from pytest_backintel.outcomes import Outcome
from pytest_backintel.scenario import Scenario
from pytest_backintel.scoring.score import names_concept, score_answer

ANSWERABLE = Scenario.model_validate(
    {
        "id": "demo",
        "version": 1,
        "title": "t",
        "question": "q",
        "dataset": {"world": "olist"},
        "split": "development",
        "level": 1,
        "family": "counts",
        "answerable": True,
        "check_sql": "SELECT 1",
        "metrics": [
            {"name": "orders", "kind": "count", "unit": "orders"},
            {"name": "revenue", "kind": "currency", "unit": "BRL"},
        ],
    }
)
UNANSWERABLE = Scenario.model_validate(
    {
        "id": "profit",
        "version": 1,
        "title": "t",
        "question": "q",
        "dataset": {"world": "olist"},
        "split": "development",
        "level": 3,
        "family": "profit",
        "answerable": False,
        "refusal": {
            "must_name": [["cost", "expense", "cost ledger"]],
            "forbidden_metric": "net_profit",
            "conditions": "no cost data",
        },
    }
)
REFERENCE = {"orders": 12, "revenue": 1234.5}


def answer(
    orders: Any = 12,
    revenue: Any = 1234.5,
    extra: list[MetricValue] | None = None,
    cite: tuple[str, ...] = ("orders", "revenue"),
) -> AnalystAnswer:
    metrics = [
        MetricValue(name="orders", value=orders, unit="orders"),
        MetricValue(name="revenue", value=revenue, unit="BRL"),
        *(extra or []),
    ]
    return AnalystAnswer(
        metrics=metrics,
        evidence=[Evidence(id="e1", kind="sql", code="SELECT ...", metrics=list(cite))],
    )


def reproduced(ans: AnalystAnswer, ok: bool = True) -> list[EvidenceResult]:
    res = []
    for ev in ans.evidence:
        r = EvidenceResult(ev.id, ev.kind, ev.code, list(ev.metrics), ran=True)
        r.reproduced = {m: ok for m in ev.metrics}
        res.append(r)
    return res


def test_right_answer_passes() -> None:
    ans = answer()
    assert score_answer(ANSWERABLE, ans, reproduced(ans), REFERENCE).outcome is Outcome.PASS


@pytest.mark.parametrize(
    ("ans", "outcome"),
    [
        (answer(orders=13), Outcome.WRONG_VALUE),
        (answer(revenue=-1234.5), Outcome.WRONG_VALUE),
        (answer(revenue=1234.506), Outcome.WRONG_VALUE),
        (answer(orders="12"), Outcome.WRONG_VALUE),
        (answer(orders=None), Outcome.MISSING_METRIC),
        (answer(extra=[MetricValue(name="orders", value=12)]), Outcome.DUPLICATE_METRIC),
        (answer(cite=("orders",)), Outcome.UNSUPPORTED_EVIDENCE),
    ],
)
def test_wrong_answers_fail_with_their_outcome(ans: AnalystAnswer, outcome: Outcome) -> None:
    assert score_answer(ANSWERABLE, ans, reproduced(ans), REFERENCE).outcome is outcome


def test_missing_metric() -> None:
    ans = AnalystAnswer(
        metrics=[MetricValue(name="orders", value=12)],
        evidence=[Evidence(id="e1", kind="sql", code="x", metrics=["orders"])],
    )
    assert (
        score_answer(ANSWERABLE, ans, reproduced(ans), REFERENCE).outcome is Outcome.MISSING_METRIC
    )


def test_evidence_that_does_not_reproduce_is_unsupported() -> None:
    ans = answer()
    score = score_answer(ANSWERABLE, ans, reproduced(ans, ok=False), REFERENCE)
    assert score.outcome is Outcome.UNSUPPORTED_EVIDENCE
    assert all(not c.evidence_ok and c.value_ok for c in score.checks)


def test_evidence_that_fails_to_run_is_unsupported() -> None:
    ans = answer()
    results = reproduced(ans)
    results[0].error, results[0].ran, results[0].reproduced = "no such table", False, {}
    assert score_answer(ANSWERABLE, ans, results, REFERENCE).outcome is Outcome.UNSUPPORTED_EVIDENCE


def test_refusing_an_answerable_question_is_a_false_refusal() -> None:
    ref = Refusal(missing=["cost ledger"], explanation="no costs")
    assert score_answer(ANSWERABLE, ref, [], REFERENCE).outcome is Outcome.FALSE_REFUSAL


def test_useful_refusal_passes_and_unhelpful_fails() -> None:
    good = Refusal(missing=["an expense ledger for 2018"], explanation="only revenue exists")
    vague = Refusal(missing=["more data"], explanation="I cannot answer this question")
    assert score_answer(UNANSWERABLE, good, [], {}).outcome is Outcome.PASS
    assert score_answer(UNANSWERABLE, vague, [], {}).outcome is Outcome.UNHELPFUL_REFUSAL


def test_answering_an_unanswerable_question_invents_a_value() -> None:
    invented = AnalystAnswer(metrics=[MetricValue(name="net_profit", value=0)], evidence=[])
    assert score_answer(UNANSWERABLE, invented, [], {}).outcome is Outcome.INVENTED_VALUE


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("The cost ledger is absent", True),
        ("no COSTS were exported", True),
        ("Expenses are not available", True),
        ("costume data", False),
        ("accosted", False),
        ("", False),
    ],
)
def test_concepts_match_whole_words(text: str, named: bool) -> None:
    assert names_concept(text, ["cost", "expense", "cost ledger"]) is named


@given(st.text())
def test_concept_matching_never_crashes(text: str) -> None:
    names_concept(text, ["cost", "a.b*c"])


@pytest.mark.parametrize(
    "explanation",
    [
        "Probably about 0 USD, since no spend is recorded.",
        "It would be roughly 120 USD.",
        "zero dollars were spent, so the value is nil",
        "my guess: 3.5 % of revenue",
    ],
)
def test_a_refusal_that_states_an_amount_invents_a_value(explanation: str) -> None:
    """However the metric is named, an amount with its currency or unit is a value."""
    said = Refusal(missing=["an expense ledger"], explanation=explanation)
    assert score_answer(UNANSWERABLE, said, [], {}).outcome is Outcome.INVENTED_VALUE


@pytest.mark.parametrize(
    "explanation",
    [
        "No spend table exists; 0 rows in marketing for 2018.",
        "The expense ledger is absent, so no USD figure can be computed.",
    ],
)
def test_a_refusal_that_counts_what_it_checked_is_no_invented_value(explanation: str) -> None:
    said = Refusal(missing=["an expense ledger"], explanation=explanation)
    assert score_answer(UNANSWERABLE, said, [], {}).outcome is Outcome.PASS
