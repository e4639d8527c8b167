"""An optional, uncalibrated judge of an answer's narrative (its method and caveats).

A Pydantic AI agent of another model family than the analyst's scores the narrative 1-5 on
three criteria: it states populations and periods, it discloses coverage and caveats, and it
stays descriptive rather than causal. Every result is labelled `"calibrated": false`: the
scores were never calibrated against human labels, and they never decide numerical
correctness (the judge is not shown reference values; the scorer alone decides pass/fail).

    check_judge_family("anthropic:claude-sonnet-4-5", "openai:gpt-5.1")   # ok
    score = judge_narrative(question, answer, "anthropic:claude-sonnet-4-5")
    record["judge"] = score.to_json()
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai import Agent
from pydantic_ai.exceptions import AgentRunError
from pydantic_ai.models import Model, parse_model_id
from pydantic_ai.usage import UsageLimits

from pytest_backintel.contract import AnalystAnswer, Refusal

__all__ = [
    "CRITERIA",
    "JudgeError",
    "JudgeFamilyError",
    "JudgeScore",
    "JudgeVerdict",
    "check_judge_family",
    "judge_narrative",
    "model_family",
]

CRITERIA = (
    "states_populations_and_periods",
    "discloses_coverage_and_caveats",
    "descriptive_not_causal",
)

FAMILY_PREFIXES: tuple[tuple[str, str], ...] = (
    # leading token of the model's base name -> family (a vendor's model line)
    ("gpt", "openai-gpt"),
    ("chatgpt", "openai-gpt"),
    ("o1", "openai-gpt"),
    ("o3", "openai-gpt"),
    ("o4", "openai-gpt"),
    ("codex", "openai-gpt"),
    ("claude", "anthropic-claude"),
    ("gemini", "google-gemini"),
    ("gemma", "google-gemini"),
    ("mistral", "mistral"),
    ("mixtral", "mistral"),
    ("codestral", "mistral"),
    ("magistral", "mistral"),
    ("ministral", "mistral"),
    ("devstral", "mistral"),
    ("pixtral", "mistral"),
    ("llama", "meta-llama"),
    ("qwen", "alibaba-qwen"),
    ("qwq", "alibaba-qwen"),
    ("deepseek", "deepseek"),
    ("grok", "xai-grok"),
    ("command", "cohere-command"),
)
"""Model-name prefixes and the family they belong to, whoever hosts the model."""

MAX_RATIONALE = 1200

INSTRUCTIONS = """\
You review the written narrative of a data analyst's answer: its method and caveats (or, for a
refusal, its explanation). You do not check numbers and you are not shown any reference values.
Score each criterion from 1 (absent or wrong) to 5 (complete and precise):
- states_populations_and_periods: names the population (which orders, statuses, persons,
  items), the period with its bounds, and the grain the metrics are computed at.
- discloses_coverage_and_caveats: discloses excluded or uncovered records, missing or
  untranslated values, duplicates and weighting, and limits of the data.
- descriptive_not_causal: describes what the data shows; makes no causal claim the data cannot
  support (an explicit statement that an association is not causal scores high).
Give a short rationale (two or three sentences)."""


class JudgeError(RuntimeError):
    """The judge model failed to produce a verdict."""


class JudgeFamilyError(ValueError):
    """The judge and the analyst are models of the same family."""


class JudgeVerdict(BaseModel):
    """The judge model's structured output."""

    model_config = ConfigDict(extra="forbid")

    states_populations_and_periods: int = Field(ge=1, le=5)
    discloses_coverage_and_caveats: int = Field(ge=1, le=5)
    descriptive_not_causal: int = Field(ge=1, le=5)
    rationale: str = Field(min_length=1, max_length=MAX_RATIONALE)


class JudgeScore(BaseModel):
    """A verdict with the judge's identity; always uncalibrated, never a correctness score."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    states_populations_and_periods: int = Field(ge=1, le=5)
    discloses_coverage_and_caveats: int = Field(ge=1, le=5)
    descriptive_not_causal: int = Field(ge=1, le=5)
    rationale: str
    judge_model: str
    judge_family: str
    calibrated: Literal[False] = False
    """Judge scores are not calibrated against human labels."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form for run records (includes `"calibrated": false`)."""
        return self.model_dump(mode="json")


def _model_id(model: Model | str) -> str:
    if isinstance(model, Model):
        return f"{model.system}:{model.model_name}"
    return model.strip()


def model_family(model: Model | str) -> str:
    """The family of a model: its vendor's model line, independent of who hosts it.

    The model id is `provider:name`; the base name is the part after the last `/` (routers
    such as `openrouter:anthropic/claude-3.5-sonnet`) with a leading vendor tag such as
    `anthropic.` or `us.anthropic.` removed (`bedrock:us.anthropic.claude-...`). Its leading
    token is looked up in `FAMILY_PREFIXES` (gpt-*, o1/o3/o4 -> openai-gpt; claude-* ->
    anthropic-claude; gemini-*/gemma-* -> google-gemini; ...). An unknown name's family is
    `<provider>/<leading letters of the name>`, e.g. `ollama/phi` for `ollama:phi3`."""
    model_id = _model_id(model)
    if not model_id:
        raise ValueError("empty model id; give '<provider>:<model>', e.g. 'openai:gpt-5.1'")
    provider, name = parse_model_id(model_id)
    base = name.rsplit("/", 1)[-1].lower()
    base = re.sub(r"^(?:[a-z]{2,4}\.)?(?:anthropic|meta|mistral|amazon|cohere|google)\.", "", base)
    token = re.split(r"[-_.:@ ]", base, maxsplit=1)[0]
    for prefix, family in FAMILY_PREFIXES:
        rest = token.removeprefix(prefix)
        if token.startswith(prefix) and (not rest or rest[0].isdigit()):
            return family
    lead = re.match(r"[a-z]+", base)
    return f"{(provider or 'unknown').lower()}/{lead.group(0) if lead else base}"


def check_judge_family(judge_model: Model | str, analyst_model: Model | str) -> None:
    """Raise `JudgeFamilyError` when the judge belongs to the analyst's model family."""
    judge, analyst = model_family(judge_model), model_family(analyst_model)
    if judge == analyst:
        raise JudgeFamilyError(
            f"judge model {_model_id(judge_model)!r} and analyst model "
            f"{_model_id(analyst_model)!r} are both of the {judge!r} family; a judge must be "
            "of another family (e.g. an anthropic:claude-* judge for an openai:gpt-* analyst)"
        )


def _narrative(question: str, answer: AnalystAnswer | Refusal) -> str:
    lines = [f"Question:\n{question}", ""]
    if isinstance(answer, AnalystAnswer):
        reported = ", ".join(f"{m.name} ({m.unit or 'no unit'})" for m in answer.metrics)
        lines += [
            f"Metrics reported (values withheld): {reported or 'none'}",
            "",
            f"Method:\n{answer.method or '(none given)'}",
            "",
            "Caveats:",
            *([f"- {c}" for c in answer.caveats] or ["(none given)"]),
        ]
    else:
        lines += [
            "The analyst declined to answer.",
            "Missing requirements:",
            *[f"- {m}" for m in answer.missing],
            "",
            f"Explanation:\n{answer.explanation}",
        ]
    return "\n".join(lines)


def judge_narrative(
    question: str,
    answer: AnalystAnswer | Refusal,
    model: Model | str,
    *,
    analyst_model: Model | str | None = None,
) -> JudgeScore:
    """Score the narrative of `answer` to `question` with the judge `model` (uncalibrated).

    With `analyst_model`, first checks that the judge is of another family."""
    if analyst_model is not None:
        check_judge_family(model, analyst_model)
    agent: Agent[None, JudgeVerdict] = Agent(
        model,
        output_type=JudgeVerdict,
        instructions=INSTRUCTIONS,
        model_settings={"temperature": 0.0},
        retries=1,
    )
    try:
        result = agent.run_sync(
            _narrative(question, answer), usage_limits=UsageLimits(request_limit=3)
        )
    except AgentRunError as exc:
        raise JudgeError(f"judge model {_model_id(model)!r} gave no verdict: {exc}") from exc
    verdict = result.output
    return JudgeScore(
        **verdict.model_dump(),
        judge_model=_model_id(model),
        judge_family=model_family(model),
    )
