"""The answer contract parses what it should and rejects what it should not."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from pytest_backintel.contract import AnalystAnswer, Refusal, parse_answer

names = st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True)
values = st.one_of(
    st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20), st.none()
)
metric = st.fixed_dictionaries({"name": names, "value": values, "unit": st.text(max_size=5)})
evidence = st.fixed_dictionaries(
    {
        "id": names,
        "kind": st.sampled_from(["sql", "python"]),
        "code": st.text(min_size=1, max_size=50),
        "metrics": st.lists(names, max_size=3),
    }
)


@given(st.lists(metric, max_size=4), st.lists(evidence, max_size=3))
def test_answers_round_trip_through_json(metrics: list[dict], evid: list[dict]) -> None:
    data = {"status": "answered", "metrics": metrics, "evidence": evid}
    parsed = parse_answer(json.dumps(data))
    assert isinstance(parsed, AnalystAnswer)
    assert parse_answer(parsed.model_dump_json()) == parsed


def test_refusal_round_trips() -> None:
    ref = parse_answer({"status": "refused", "missing": ["cost ledger"], "explanation": "x"})
    assert isinstance(ref, Refusal)
    assert ref.missing == ["cost ledger"]


@pytest.mark.parametrize(
    "data",
    [
        {"status": "maybe", "metrics": [], "evidence": []},
        {"status": "answered", "metrics": [{"name": "x", "value": 1}], "evidence": [], "extra": 1},
        {"status": "answered", "metrics": [{"name": "x", "value": {"a": 1}}], "evidence": []},
        {"status": "answered", "metrics": [], "evidence": [{"id": "e", "kind": "r", "code": "x"}]},
        {"status": "refused", "missing": [], "explanation": "x"},
        {"metrics": []},
    ],
)
def test_malformed_answers_are_rejected(data: dict) -> None:
    with pytest.raises(ValidationError):
        parse_answer(data)
