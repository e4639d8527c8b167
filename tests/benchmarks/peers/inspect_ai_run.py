"""The same slow-model job as `test_bench_latency.py`, run by inspect-ai: SAMPLES samples, each
an agent of four model requests (three tool calls and the answer) against the scripted
OpenAI-compatible server at `sys.argv[1]` (inspect's `openai-api` provider: Chat Completions),
at most `sys.argv[2]` model requests at once (`max_connections`), every sample started at once
(`max_samples`), as BackIntel's `--concurrency 40 --max-connections 16`.

Run with a Python that has `inspect-ai` and `openai` (not dependencies of this project; see
`test_bench_peers.py`). Prints one JSON line: the samples that answered and those that did not.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
from typing import Any

from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import execute_tools, get_model
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.tool import Tool, tool

SAMPLES = 40
ANSWER = "final_result_AnalystAnswer"
db = sqlite3.connect(":memory:", check_same_thread=False)
db.execute("CREATE TABLE orders (order_id TEXT, order_status TEXT)")


@tool
def list_tables() -> Tool:
    async def execute() -> str:
        """The tables of the store."""
        return repr([r[0] for r in db.execute("SELECT name FROM sqlite_master")])

    return execute


@tool
def describe_table() -> Tool:
    async def execute(name: str) -> str:
        """A table's columns.

        Args:
            name: the table.
        """
        return repr(db.execute(f"PRAGMA table_info({name})").fetchall())

    return execute


@tool
def run_sql() -> Tool:
    async def execute(sql: str) -> str:
        """Run a read-only query.

        Args:
            sql: the query.
        """
        return repr(db.execute(sql).fetchall())

    return execute


@tool(name=ANSWER)
def final_answer() -> Tool:
    async def execute(metrics: list[dict[str, Any]], evidence: list[dict[str, Any]]) -> str:
        """Report the answer.

        Args:
            metrics: each metric's name, value and unit.
            evidence: the queries that give them.
        """
        return json.dumps({"metrics": metrics, "evidence": evidence})

    return execute


@solver
def analyst() -> Any:
    """Model request, tool calls, again, until the model calls the answer tool."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        state.tools = [list_tables(), describe_table(), run_sql(), final_answer()]
        model = get_model()
        while True:
            output = await model.generate(state.messages, state.tools)
            state.messages.append(output.message)
            state.output = output
            calls = output.message.tool_calls or []
            if not calls or any(c.function == ANSWER for c in calls):
                return state
            result = await execute_tools(state.messages, state.tools)
            state.messages.extend(result.messages)

    return solve


def main() -> None:
    url, connections = sys.argv[1], int(sys.argv[2])
    question = "How many orders were delivered? Report `delivered_orders`."
    task = Task(dataset=[Sample(input=question, id=i) for i in range(SAMPLES)], solver=analyst())
    model = get_model("openai-api/bench/bench", base_url=url, api_key="x")
    with tempfile.TemporaryDirectory() as logs:
        (log,) = eval(
            task, model=model, max_connections=connections, max_samples=SAMPLES,
            display="none", log_dir=logs,
        )  # fmt: skip
        answered = sum(
            any(c.function == ANSWER for c in (s.output.message.tool_calls or []))
            for s in log.samples or []
        )
    print(json.dumps({"answered": answered, "failed": SAMPLES - answered, "status": log.status}))


if __name__ == "__main__":
    main()
