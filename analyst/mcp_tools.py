"""One trial's tools as an MCP server, for an agent outside the harness's process.

The tools are the built-in analyst's own (`analyst.tools`: list_tables, describe_table,
run_sql, run_python where the item has a sandbox) over the same `AnalystDeps`, plus
`submit_answer` and `refuse`, which carry the answer contract. Every call is recorded here,
server side (tool, arguments, result size, time, error): what an agent claims it called is not
evidence of anything. The tool-call budget of the built-in analyst applies; calls after the
answer, and a second answer, are refused and recorded.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.mcpserver import MCPServer
from opentelemetry import trace
from pydantic import ValidationError

from analyst import tools
from analyst.tools import AnalystDeps
from pytest_backintel.analyst_api import InfraError
from pytest_backintel.contract import AnalystAnswer, Evidence, MetricValue, Refusal
from stores.base import StoreError, StoreSession

__all__ = ["TOOL_NAMES", "TrialTools"]

TOOL_NAMES = ("list_tables", "describe_table", "run_sql", "run_python", "submit_answer", "refuse")
_ARG_CHARS = 20_000
"""The most characters of one argument kept in a call's record."""


def _tracer() -> trace.Tracer:
    """The harness's tracer when it instruments agents (so the calls land in the run's
    traces), else the global one."""
    from pydantic_ai import Agent
    from pydantic_ai.models.instrumented import InstrumentationSettings

    settings = Agent._instrument_default
    if isinstance(settings, InstrumentationSettings):
        return settings.tracer
    return trace.get_tracer("backintel.mcp")


class _Ctx:
    """What `analyst.tools` reads of a Pydantic AI `RunContext`: the deps and a call id."""

    def __init__(self, deps: AnalystDeps, call_id: str) -> None:
        self.deps = deps
        self.tool_call_id = call_id


def _kept(args: dict[str, Any]) -> dict[str, Any]:
    return {k: v[:_ARG_CHARS] if isinstance(v, str) else v for k, v in args.items()}


class TrialTools:
    """The tools of one trial and everything its agent did with them."""

    def __init__(
        self,
        connect: Callable[[], StoreSession],
        run_python: Callable[[str], str] | None,
        *,
        max_tool_calls: int,
        question: str = "",
        rules: str = "",
        name: str = "backintel-trial",
    ) -> None:
        self.deps = AnalystDeps(connect, run_python)
        self.max_tool_calls = max_tool_calls
        self.calls: list[dict[str, Any]] = []
        """Every call in order: tool, args, result_bytes, duration_s, error, refused."""
        self.answers: list[AnalystAnswer | Refusal] = []
        self.over_budget = False
        self.infra_error: str | None = None
        self.closed = False
        self._started = time.perf_counter()
        self._tracer = _tracer()
        self.parent_context: Any = None
        """The OpenTelemetry context of the trial's span, so each call is a child of it."""
        instructions = f"{question}\n\n{rules}".strip()
        self.server = MCPServer(name, instructions=instructions or None)
        self._register(run_python is not None)

    # -- the tools -------------------------------------------------------------------------
    def _register(self, with_python: bool) -> None:
        async def list_tables() -> str:
            """List the tables in the data store, one name a line."""
            return await self._call("list_tables", {}, self._list_tables)

        async def describe_table(name: str) -> str:
            """Describe one table: its columns with types and nullability, and its row count."""
            return await self._call(
                "describe_table", {"name": name}, lambda c: tools.describe_table(c, name)
            )

        async def run_sql(sql: str) -> str:
            return await self._call("run_sql", {"sql": sql}, lambda c: tools.run_sql(c, sql))

        run_sql.__doc__ = tools.run_sql.__doc__

        async def run_python(code: str) -> str:
            return await self._call(
                "run_python", {"code": code}, lambda c: tools.run_python(c, code)
            )

        run_python.__doc__ = tools.run_python.__doc__

        async def submit_answer(
            metrics: list[MetricValue],
            evidence: list[Evidence],
            method: str = "",
            caveats: list[str] | None = None,
        ) -> str:
            """Submit the answer: every requested metric once (a JSON number, a string for text
            metrics, or rows for tables) and the SQL or Python evidence that computes each one.
            The harness re-runs the evidence. Only one answer counts; no tool works after it."""
            fields = {
                "metrics": [m.model_dump(mode="json") for m in metrics],
                "evidence": [e.model_dump(mode="json") for e in evidence],
                "method": method,
                "caveats": caveats or [],
            }
            return await self._answer("submit_answer", fields, AnalystAnswer)

        async def refuse(
            missing: list[str], explanation: str, evidence: list[Evidence] | None = None
        ) -> str:
            """Refuse to answer: name each requirement the data lacks (`missing`) and explain;
            optionally cite evidence of what was checked. Only one answer counts."""
            fields = {
                "missing": missing,
                "explanation": explanation,
                "evidence": [e.model_dump(mode="json") for e in evidence or []],
            }
            return await self._answer("refuse", fields, Refusal)

        chosen: list[Callable[..., Awaitable[str]]] = [
            list_tables,
            describe_table,
            run_sql,
            *([run_python] if with_python else []),
            submit_answer,
            refuse,
        ]
        for fn in chosen:
            self.server.add_tool(fn, structured_output=False)

    async def _list_tables(self, ctx: Any) -> str:
        return "\n".join(await tools.list_tables(ctx))

    # -- recording and limits --------------------------------------------------------------
    def _refusal(self, tool: str) -> str | None:
        if self.closed:
            return "ERROR: the trial is over; its tools are closed."
        if self.answers:
            return "ERROR: the trial's answer is already in; no tool works after it."
        if self.over_budget or len(self.calls) >= self.max_tool_calls:
            self.over_budget = True
            return f"ERROR: the tool-call limit ({self.max_tool_calls}) is reached."
        if self.infra_error is not None:
            return "ERROR: the store failed; the trial is over."
        return None

    def _entry(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "tool": tool,
            "args": _kept(args),
            "at_s": round(time.perf_counter() - self._started, 4),
            "source": "mcp",
        }

    async def _call(
        self, tool: str, args: dict[str, Any], run: Callable[[Any], Awaitable[Any]]
    ) -> str:
        entry = self._entry(tool, args)
        refused = self._refusal(tool)
        if refused is not None:
            entry.update(result_bytes=len(refused), duration_s=0.0, error=refused, refused=True)
            entry["after_answer"] = bool(self.answers)
            self.calls.append(entry)
            return refused
        self.calls.append(entry)
        started = time.perf_counter()
        error: str | None = None
        with self._tracer.start_as_current_span(
            f"mcp tool {tool}", context=self.parent_context
        ) as span:
            span.set_attribute("backintel.tool", tool)
            try:
                result = await run(_Ctx(self.deps, f"mcp-{len(self.calls)}"))
                text = result if isinstance(result, str) else str(result)
                if text.startswith("ERROR"):
                    error = text.splitlines()[0][:500]
            except (InfraError, StoreError) as exc:
                self.infra_error = str(exc)
                error = text = f"ERROR: the store or sandbox failed: {exc}"
            span.set_attribute("backintel.result_bytes", len(text.encode()))
            if error:
                span.set_attribute("backintel.error", error)
        entry.update(
            result_bytes=len(text.encode()),
            duration_s=round(time.perf_counter() - started, 4),
            error=error,
            refused=False,
        )
        return text

    async def _answer(
        self, tool: str, fields: dict[str, Any], model: type[AnalystAnswer] | type[Refusal]
    ) -> str:
        entry = self._entry(tool, fields)
        self.calls.append(entry)
        refused = "ERROR: a second answer; the first one stands." if self.answers else None
        refused = refused or self._refusal(tool)
        if self.answers:
            entry["second_answer"] = True
        if refused is not None:
            entry.update(result_bytes=len(refused), duration_s=0.0, error=refused, refused=True)
            return refused
        try:
            answer = model.model_validate(fields)
        except ValidationError as exc:
            text = f"ERROR: not a valid answer: {exc}"
            entry.update(result_bytes=len(text), duration_s=0.0, error=text[:500], refused=False)
            return text
        self.answers.append(answer)
        entry.update(result_bytes=8, duration_s=0.0, error=None, refused=False)
        return "recorded"

    def close(self) -> None:
        """No call works after this; the store session closes."""
        self.closed = True
        self.deps.close(wait=False)
