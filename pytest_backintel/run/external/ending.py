"""How an external agent's process ended, as the trial's run: its answer (through the submit
or refuse tool, or one contract JSON object printed on stdout), or why there is none.

Each ending is a recorded outcome: the wall-time limit is `timeout`, the tool-call limit
`budget_exceeded`, a store failure `infra_error`; a crash (stderr tail kept), a signal, an exit
without an answer, a malformed answer and a second answer are `analyst_error`. Tool calls after
the answer are refused by the server and recorded; the answer stands.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from analyst.mcp_tools import TrialTools
from pytest_backintel.analyst_api import (
    AnalystLimits,
    AnalystRun,
    AnalystTimeout,
    BudgetExceeded,
    InfraError,
    ProviderError,
    Usage,
)
from pytest_backintel.contract import AnalystAnswer, Refusal, parse_answer
from pytest_backintel.run.gateway import GatewayUsage
from pytest_backintel.sandbox.base import ExecResult

__all__ = ["STDERR_TAIL", "judge_ending", "stdout_answer"]

STDERR_TAIL = 4000
"""The most characters of the agent's stderr kept in the record (its end)."""
_ANSWER_TOOLS = ("submit_answer", "refuse")


def stdout_answer(stdout: str) -> tuple[AnalystAnswer | Refusal | None, str | None]:
    """The contract object printed on stdout (the whole output, or its last line that is a
    JSON object), or None and why it is not one (None, None: nothing printed)."""
    text = stdout.strip()
    if not text:
        return None, None
    candidates = [text, *[ln.strip() for ln in reversed(text.splitlines()) if ln.strip()]]
    problem = "stdout holds no JSON object"
    for candidate in candidates:
        if not candidate.startswith("{"):
            continue
        try:
            data = json.loads(candidate)
        except json.JSONDecodeError as exc:
            problem = f"stdout is not JSON ({exc})"
            continue
        if not isinstance(data, dict) or data.get("status") not in ("answered", "refused"):
            problem = 'the JSON object on stdout has no "status": "answered" or "refused"'
            continue
        try:
            return parse_answer(data), None
        except ValidationError as exc:
            return None, f"the answer on stdout breaks the contract: {exc}"
    return None, problem


def _usage(tools: TrialTools, usage: GatewayUsage | None) -> tuple[Usage, str]:
    calls = sum(1 for c in tools.calls if not c.get("refused"))
    if usage is None:
        return Usage(tool_calls=calls, tokens_reported=False), "none"
    return usage.to_usage(calls), "gateway"


def judge_ending(
    result: ExecResult,
    tools: TrialTools,
    refused: list[dict[str, Any]],
    usage: GatewayUsage | None,
    limits: AnalystLimits,
    *,
    unsafe: bool,
) -> AnalystRun:
    """The trial's run; raises `AnalystTimeout`, `BudgetExceeded` or `InfraError` with it."""
    run_usage, source = _usage(tools, usage)
    answered = [c for c in tools.calls if c["tool"] in _ANSWER_TOOLS and not c.get("refused")]
    after = [c for c in tools.calls if c.get("refused") and c.get("after_answer")]
    observed: dict[str, Any] = {
        "usage_source": source,
        "sandboxed": not unsafe,
        "exit_code": result.returncode,
        "limit_hit": result.limit_hit,
        "duration_s": result.duration_s,
        "stderr_tail": result.stderr[-STDERR_TAIL:],
        "stdout_bytes": len(result.stdout.encode()),
        "refused_requests": refused,
        "calls_after_answer": len(after),
        "gateway": usage.to_json() if usage is not None else None,
    }
    run = AnalystRun(output=None, usage=run_usage, tool_calls=tools.calls, observed=observed)
    if usage is not None:
        run.provider_retries = usage.provider_retries
        observed["exchanges"] = usage.exchanges  # to the cassette with --record, not the record
    if tools.infra_error is not None:
        raise InfraError(tools.infra_error)
    if result.limit_hit == "wall_time":
        run.error = f"the agent ran past {limits.wall_time_s:g} s (--analyst-timeout)"
        raise AnalystTimeout(run.error, run=run)
    if tools.over_budget:
        run.error = f"the agent passed the tool-call limit ({limits.max_tool_calls})"
        raise BudgetExceeded(run.error, run=run)
    printed, problem = stdout_answer(result.stdout)
    extra = [c for c in tools.calls if c["tool"] in _ANSWER_TOOLS and c.get("second_answer")]
    if tools.answers and (extra or printed is not None):
        run.error = "the agent answered twice (a second answer call, or an answer on stdout too)"
        return run
    answer = tools.answers[0] if tools.answers else printed
    observed["answered_by"] = "tool" if tools.answers else ("stdout" if printed else None)
    if answer is not None:
        run.output = answer
        return run
    run.error = _no_answer(result, problem, bool(answered))
    if usage is not None and usage.provider_error:  # the model failed, not the agent
        raise ProviderError(f"{usage.provider_error}; {run.error}", run=run)
    if usage is not None and usage.budget_exceeded:
        raise BudgetExceeded(f"{usage.budget_exceeded}; {run.error}", run=run)
    return run


def _no_answer(result: ExecResult, problem: str | None, tried: bool) -> str:
    tail = result.stderr.strip()[-400:]
    said = f"; stderr ends: {tail}" if tail else ""
    if result.limit_hit is not None:
        return f"the agent hit its sandbox's {result.limit or result.limit_hit} limit{said}"
    if result.returncode < 0:
        return f"the agent was killed by signal {-result.returncode} before answering{said}"
    if problem is not None:
        return f"malformed answer: {problem}{said}"
    if result.returncode != 0:
        return f"the agent exited with code {result.returncode} without an answer{said}"
    if tried:
        return f"the agent's answer calls were all invalid{said}"
    return f"the agent exited without an answer (neither the submit tool nor stdout){said}"
