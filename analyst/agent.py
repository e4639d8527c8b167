"""The default analyst: one Pydantic AI agent with the store tools and on-demand skills.

`build_agent` makes the agent (nothing is built at import time); `run_agent` runs it on one
task under the task's usage and wall-clock limits and returns an `AnalystRun`. `ModelAnalyst`
is the analyst a real model drives; calibration analysts drive the same agent through
`FunctionModel` (see `analyst.calibration`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

from pydantic_ai import Agent, ModelRetry, capture_run_messages
from pydantic_ai.exceptions import ModelAPIError, UnexpectedModelBehavior, UsageLimitExceeded
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    ToolCallPart,
)
from pydantic_ai.models import Model, ModelRequestParameters, infer_model
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RunUsage, UsageLimits

from analyst.connections import ConnectionLimitedModel
from analyst.loop import run_blocking
from analyst.retries import RETRY_LOG, RetryingModel, RetryPolicy
from analyst.schema_cache import cache_tool_schemas
from analyst.tools import AnalystDeps, analyst_tools, skill_catalog
from pytest_backintel.analyst_api import (
    AnalystKind,
    AnalystLimits,
    AnalystRun,
    AnalystTask,
    AnalystTimeout,
    BudgetExceeded,
    ProviderError,
    Usage,
)
from pytest_backintel.contract import AnalystAnswer, Refusal

__all__ = [
    "OUTPUT_TOOL_NAMES",
    "PROMPT_PATH",
    "AnalystAgent",
    "ModelAnalyst",
    "PricedModel",
    "build_agent",
    "build_instructions",
    "check_contract",
    "dump_messages",
    "run_agent",
    "task_prompt",
    "usage_limits",
]

PROMPT_PATH = Path(__file__).parent / "prompts" / "system.md"
OUTPUT_TOOL_NAMES = ("final_result_AnalystAnswer", "final_result_Refusal")
"""The output tools Pydantic AI names for `output_type=[AnalystAnswer, Refusal]`."""
RETRIES = 3
"""Retries per tool and for the output (invalid arguments, a contract check that failed)."""

AnalystAgent = Agent[AnalystDeps, AnalystAnswer | Refusal]
_T = TypeVar("_T")


def build_instructions() -> str:
    """The system prompt followed by the skill catalogue (names and one-line descriptions)."""
    lines = [PROMPT_PATH.read_text(encoding="utf-8").rstrip(), "", "## Skills", ""]
    lines.append("Load one with `load_skill(name)` when it applies:")
    lines += [f"- `{s.name}`: {s.description}" for s in skill_catalog()]
    return "\n".join(lines)


def task_prompt(task: AnalystTask) -> str:
    """What the model is asked: the question, then the task's own answer contract and
    comparison rules (`task.rules`, the text every analyst receives), so the built-in analyst is
    measured on the same terms as a custom one and the rules have one source."""
    if not task.rules:
        return task.question
    return f"{task.question}\n\n## How your answer is scored\n\n{task.rules}"


def check_contract(output: AnalystAnswer | Refusal) -> AnalystAnswer | Refusal:
    """Ask the model to fix an answer that breaks the contract in ways it can see itself."""
    if isinstance(output, Refusal):
        return output
    problems: list[str] = []
    names = [m.name for m in output.metrics]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        problems.append(f"metrics reported more than once: {', '.join(dupes)}")
    cited = {name for ev in output.evidence for name in ev.metrics}
    if uncited := [n for n in dict.fromkeys(names) if n not in cited]:
        problems.append(f"metrics not cited by any evidence item: {', '.join(uncited)}")
    if unknown := sorted(cited - set(names)):
        problems.append(f"evidence cites metrics that are not reported: {', '.join(unknown)}")
    ids = [ev.id for ev in output.evidence]
    if len(ids) != len(set(ids)):
        problems.append("evidence ids must be unique")
    if problems:
        raise ModelRetry("The answer breaks the contract: " + "; ".join(problems) + ".")
    return output


def build_agent(model: Model | str | None = None) -> AnalystAgent:
    """A fresh analyst agent. `model` may be left out and given per run instead."""
    agent: AnalystAgent = Agent(
        model,
        output_type=[AnalystAnswer, Refusal],
        deps_type=AnalystDeps,
        instructions=build_instructions(),
        tools=analyst_tools(),
        retries=RETRIES,
        defer_model_check=True,
        name="backintel-analyst",
    )
    agent.output_validator(check_contract)
    return agent


def usage_limits(limits: AnalystLimits) -> UsageLimits:
    return UsageLimits(
        request_limit=limits.max_requests,
        tool_calls_limit=limits.max_tool_calls,
        total_tokens_limit=limits.max_tokens,
        cost_limit=None if limits.max_cost_usd is None else Decimal(str(limits.max_cost_usd)),
    )


def dump_messages(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    """The message history in Pydantic AI's JSON form (loads back with the same adapter)."""
    dumped: list[dict[str, Any]] = ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")
    return dumped


def _tool_calls(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    return [
        {"tool": part.tool_name, "args": part.args_as_dict()}
        for msg in messages
        if isinstance(msg, ModelResponse)
        for part in msg.parts
        if isinstance(part, ToolCallPart) and part.tool_name not in OUTPUT_TOOL_NAMES
    ]


def _unreported(messages: Sequence[ModelMessage]) -> bool:
    """Whether a response came back without token counts (Pydantic AI marks it unmeasured)."""
    return any(isinstance(m, ModelResponse) and m.usage.unmeasured_requests for m in messages)


def _usage(run_usage: RunUsage, messages: Sequence[ModelMessage]) -> Usage:
    return Usage(
        requests=run_usage.requests,
        input_tokens=run_usage.input_tokens,
        output_tokens=run_usage.output_tokens,
        tool_calls=run_usage.tool_calls,
        tokens_reported=not _unreported(messages),
    )


def _usage_from_messages(messages: Sequence[ModelMessage]) -> Usage:
    """Usage of a run that raised, summed from the responses it got."""
    responses = [m for m in messages if isinstance(m, ModelResponse)]
    return Usage(
        requests=len(responses),
        input_tokens=sum(r.usage.input_tokens for r in responses),
        output_tokens=sum(r.usage.output_tokens for r in responses),
        tool_calls=len(_tool_calls(messages)),
        tokens_reported=not _unreported(messages),
    )


def _partial(
    messages: Sequence[ModelMessage], retries: list[dict[str, Any]], error: str
) -> AnalystRun:
    """What a run that stopped early had spent: usage, messages, tool calls, retries."""
    return AnalystRun(
        output=None,
        usage=_usage_from_messages(messages),
        messages=dump_messages(messages),
        tool_calls=_tool_calls(messages),
        error=error,
        provider_retries=list(retries),
    )


async def _run(
    agent: AnalystAgent, task: AnalystTask, make_model: Callable[[AnalystDeps], Model | str]
) -> AnalystRun:
    deps = AnalystDeps(task.connect, task.run_python)
    retries: list[dict[str, Any]] = []
    token = RETRY_LOG.set(retries)
    timed_out = False
    try:
        with capture_run_messages() as messages:
            timer = asyncio.timeout(task.limits.wall_time_s)
            try:
                async with timer:
                    result = await agent.run(
                        task_prompt(task),
                        model=make_model(deps),
                        deps=deps,
                        usage_limits=usage_limits(task.limits),
                    )
            except TimeoutError as exc:
                if not timer.expired():
                    raise
                timed_out = True
                why = (
                    f"the analyst ran past its wall-clock limit of {task.limits.wall_time_s}s "
                    f"after {len(messages)} messages"
                )
                raise AnalystTimeout(why, run=_partial(messages, retries, why)) from exc
            except UsageLimitExceeded as exc:
                why = f"usage limit reached: {exc}"
                raise BudgetExceeded(why, run=_partial(messages, retries, why)) from exc
            except ModelAPIError as exc:
                why = (
                    f"the model provider failed after {len(retries)} recorded attempt(s): "
                    f"{type(exc).__name__}: {exc}"
                )
                raise ProviderError(why, run=_partial(messages, retries, why)) from exc
            except UnexpectedModelBehavior as exc:
                why = f"the model ended without a contract answer: {exc}"
                return _partial(messages, retries, why)
    finally:
        RETRY_LOG.reset(token)
        deps.close(wait=not timed_out)
    history = result.all_messages()
    return AnalystRun(
        output=result.output,
        usage=_usage(result.usage, history),
        messages=dump_messages(history),
        tool_calls=_tool_calls(history),
        provider_retries=retries,
    )


def run_agent(
    agent: AnalystAgent, task: AnalystTask, make_model: Callable[[AnalystDeps], Model | str]
) -> AnalystRun:
    """Run `agent` on `task` with the model `make_model(deps)` returns for this run.

    Raises `BudgetExceeded` or `AnalystTimeout` for the limits and `ProviderError` when the
    model's service failed after retries, each carrying what the run had spent; a run that ends
    without a contract answer returns `AnalystRun(output=None, error=...)`.
    """
    return run_blocking(lambda: _run(agent, task, make_model))


def _model_label(model: Model | str) -> str:
    return model if isinstance(model, str) else f"{model.system}:{model.model_name}"


class PricedModel(WrapperModel):
    """Sets each response's `usage.cost` from a price in USD per million tokens, so Pydantic
    AI's `cost_limit` counts with the same prices as the run records."""

    def __init__(self, wrapped: Model, input_usd: float, output_usd: float) -> None:
        super().__init__(wrapped)
        self.input_usd, self.output_usd = input_usd, output_usd

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        response = await super().request(messages, model_settings, model_request_parameters)
        usage = response.usage
        usd = usage.input_tokens * self.input_usd + usage.output_tokens * self.output_usd
        usage.cost = Decimal(str(usd / 1_000_000))
        return response


def _priced(model: Model, name: str) -> Model:
    """`model` priced from `pytest_backintel/records/prices.json` by `name`; unpriced when
    the table lacks it."""
    from pytest_backintel.records.prices import load_prices

    price = load_prices().price_for(name)
    return model if price is None else PricedModel(model, price.input, price.output)


class ModelAnalyst:
    """The analyst under test when a real model drives the agent."""

    kind: AnalystKind = "model"

    def __init__(
        self,
        model: Model | str,
        *,
        name: str | None = None,
        check: Callable[[], None] = lambda: None,
        retry_policy: RetryPolicy | None = None,
        max_connections: int | None = None,
        connection_group: str | None = None,
    ) -> None:
        self.model = model
        self.connection_group = connection_group
        """Analysts with the same group share one `max_connections` cap (one provider)."""
        self.name = name or _model_label(model)
        self._agent = build_agent()
        self._resolved: Model | None = None
        self._check = check
        self._retry_policy = retry_policy
        self.max_connections = max_connections

    def resolve(self) -> Model:
        """The model with prices, the connection limit and recorded retries (a retry's wait
        holds no connection); a model string is resolved here, once (which needs its
        provider's package and key)."""
        if self._resolved is None:
            priced = _priced(cache_tool_schemas(infer_model(self.model)), self.name)
            if self.max_connections is not None:
                priced = ConnectionLimitedModel(
                    priced, self.max_connections, group=self.connection_group
                )
            self._resolved = RetryingModel(priced, self._retry_policy)
        return self._resolved

    def check(self) -> None:
        """Before the first item: resolve the model and check its server can be reached."""
        self.resolve()
        self._check()

    def answer(self, task: AnalystTask) -> AnalystRun:
        resolved = self.resolve()
        return run_agent(self._agent, task, lambda _deps: resolved)
