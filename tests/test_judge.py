"""The narrative judge: family rule, structured uncalibrated verdicts, no reference leakage."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pytest_backintel.contract import AnalystAnswer, Evidence, MetricValue, Refusal
from pytest_backintel.scoring.judge import (
    CRITERIA,
    JudgeError,
    JudgeFamilyError,
    JudgeScore,
    check_judge_family,
    judge_narrative,
    model_family,
)

QUESTION = "Delivery report for orders purchased in March 2018; report `late_share`."
ANSWER = AnalystAnswer(
    metrics=[MetricValue(name="late_share", value=0.1641791045, unit="ratio")],
    evidence=[Evidence(id="e1", kind="sql", code="SELECT 1 AS late_share", metrics=[])],
    method="Delivered orders purchased 2018-03-01 to before 2018-04-01 with a delivery time.",
    caveats=["Two delivered orders have no delivery timestamp and are excluded."],
)
GOOD: dict[str, Any] = {
    "states_populations_and_periods": 5,
    "discloses_coverage_and_caveats": 4,
    "descriptive_not_causal": 5,
    "rationale": "Population and period are stated; exclusions are disclosed.",
}


def verdict_model(
    verdicts: list[dict[str, Any]], seen: list[str], name: str = "claude-judge"
) -> FunctionModel:
    """A judge that answers with the given verdicts in turn, recording the prompts it saw."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(ModelMessagesTypeAdapter.dump_json(messages).decode())
        args = verdicts[min(len(seen), len(verdicts)) - 1]
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])

    return FunctionModel(respond, model_name=name)


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("openai:gpt-5.1", "openai-gpt"),
        ("openai:gpt4o-mini", "openai-gpt"),
        ("openai:o3-mini", "openai-gpt"),
        ("azure:gpt-4o", "openai-gpt"),
        ("openai-responses:gpt-5", "openai-gpt"),
        ("anthropic:claude-sonnet-4-5", "anthropic-claude"),
        ("bedrock:us.anthropic.claude-3-5-sonnet-20241022-v2:0", "anthropic-claude"),
        ("openrouter:anthropic/claude-3.5-sonnet", "anthropic-claude"),
        ("google-gla:gemini-2.5-pro", "google-gemini"),
        ("google-vertex:gemini-2.0-flash", "google-gemini"),
        ("groq:llama-3.3-70b-versatile", "meta-llama"),
        ("ollama:qwen2.5:7b", "alibaba-qwen"),
        ("mistral:mistral-large-latest", "mistral"),
        ("ollama:phi3", "ollama/phi"),
        ("test", "unknown/test"),
    ],
)
def test_model_family(model: str, family: str) -> None:
    assert model_family(model) == family


def test_model_family_rejects_an_empty_id() -> None:
    with pytest.raises(ValueError, match="empty model id"):
        model_family("  ")


@pytest.mark.parametrize(
    ("judge", "analyst"),
    [
        ("openai:gpt-5.1", "openai:gpt-4o"),
        ("azure:gpt-4o", "openai:o3-mini"),
        ("anthropic:claude-opus-4", "bedrock:anthropic.claude-3-haiku"),
        ("google-gla:gemini-2.5-pro", "google-vertex:gemini-2.0-flash"),
    ],
)
def test_same_family_is_rejected_naming_both(judge: str, analyst: str) -> None:
    with pytest.raises(JudgeFamilyError) as err:
        check_judge_family(judge, analyst)
    assert judge in str(err.value)
    assert analyst in str(err.value)


@pytest.mark.parametrize(
    ("judge", "analyst"),
    [
        ("anthropic:claude-sonnet-4-5", "openai:gpt-5.1"),
        ("google-gla:gemini-2.5-pro", "anthropic:claude-opus-4"),
        ("openai:gpt-5.1", "groq:llama-3.3-70b-versatile"),
    ],
)
def test_other_family_is_accepted(judge: str, analyst: str) -> None:
    check_judge_family(judge, analyst)


PROVIDERS = st.sampled_from(["openai", "azure", "anthropic", "bedrock", "ollama", "groq", "x"])
NAMES = st.from_regex(r"[a-z][a-z0-9]{0,6}(-[a-z0-9]{1,5}){0,2}", fullmatch=True)


@given(PROVIDERS, NAMES)
def test_a_model_never_judges_itself(provider: str, name: str) -> None:
    with pytest.raises(JudgeFamilyError):
        check_judge_family(f"{provider}:{name}", f"{provider}:{name}")


@given(PROVIDERS, NAMES, PROVIDERS, NAMES)
def test_the_family_rule_is_symmetric(p1: str, n1: str, p2: str, n2: str) -> None:
    a, b = f"{p1}:{n1}", f"{p2}:{n2}"

    def rejected(judge: str, analyst: str) -> bool:
        try:
            check_judge_family(judge, analyst)
        except JudgeFamilyError:
            return True
        return False

    assert rejected(a, b) == rejected(b, a)


@given(PROVIDERS, st.from_regex(r"[0-9][a-z0-9.-]{0,8}", fullmatch=True))
def test_gpt_models_are_one_family_wherever_hosted(provider: str, suffix: str) -> None:
    assert model_family(f"{provider}:gpt-{suffix}") == "openai-gpt"
    assert model_family(f"{provider}:claude-{suffix}") == "anthropic-claude"


def test_judge_returns_structured_uncalibrated_scores() -> None:
    seen: list[str] = []
    score = judge_narrative(QUESTION, ANSWER, verdict_model([GOOD], seen))
    assert (score.states_populations_and_periods, score.discloses_coverage_and_caveats) == (5, 4)
    assert score.descriptive_not_causal == 5
    assert score.judge_model == "function:claude-judge"
    record = score.to_json()
    assert record["calibrated"] is False
    assert set(CRITERIA) <= set(record)
    assert "pass" not in record
    assert "outcome" not in record


def test_judge_sees_the_narrative_but_no_values() -> None:
    seen: list[str] = []
    judge_narrative(QUESTION, ANSWER, verdict_model([GOOD], seen))
    prompt = seen[0]
    assert "Two delivered orders have no delivery timestamp" in prompt
    assert "2018-03-01 to before 2018-04-01" in prompt
    assert "late_share (ratio)" in prompt
    assert "0.1641791045" not in prompt
    assert "SELECT 1" not in prompt


def test_judge_scores_a_refusal_explanation() -> None:
    seen: list[str] = []
    refusal = Refusal(missing=["cost ledger for 2018"], explanation="No expense records exist.")
    score = judge_narrative(QUESTION, refusal, verdict_model([GOOD], seen))
    assert score.calibrated is False
    assert "cost ledger for 2018" in seen[0]
    assert "No expense records exist." in seen[0]


def test_out_of_range_scores_are_retried_then_rejected() -> None:
    seen: list[str] = []
    bad = {**GOOD, "descriptive_not_causal": 7}
    score = judge_narrative(QUESTION, ANSWER, verdict_model([bad, GOOD], seen))
    assert len(seen) == 2
    assert score.descriptive_not_causal == 5
    with pytest.raises(JudgeError, match="function:claude-judge"):
        judge_narrative(QUESTION, ANSWER, verdict_model([bad], []))


def test_a_judge_that_only_chats_is_an_error() -> None:
    def chat(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("Looks fine to me.")])

    with pytest.raises(JudgeError, match="gave no verdict"):
        judge_narrative(QUESTION, ANSWER, FunctionModel(chat, model_name="gemini-chatty"))


def test_same_family_judge_is_refused_before_any_request() -> None:
    seen: list[str] = []
    with pytest.raises(JudgeFamilyError):
        judge_narrative(QUESTION, ANSWER, "openai:gpt-5.1", analyst_model="openai:gpt-4o")
    gpt_judge = verdict_model([GOOD], seen, name="gpt-judge")
    with pytest.raises(JudgeFamilyError):
        judge_narrative(QUESTION, ANSWER, gpt_judge, analyst_model="azure:gpt-4o")
    assert seen == []
    score = judge_narrative(
        QUESTION, ANSWER, verdict_model([GOOD], seen), analyst_model="openai:gpt-5.1"
    )
    assert score.judge_family == "anthropic-claude"
    assert len(seen) == 1


def test_a_score_cannot_claim_calibration() -> None:
    with pytest.raises(ValidationError):
        JudgeScore(
            **GOOD,
            judge_model="anthropic:claude-x",
            judge_family="anthropic-claude",
            calibrated=True,  # type: ignore[arg-type]
        )
