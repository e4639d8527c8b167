"""The same slow-model job as `test_bench_latency.py`, run by pydantic-evals: SAMPLES cases,
each an agent of four model requests (three tool calls and the answer) against the scripted
OpenAI-compatible server at `sys.argv[1]`, at most `sys.argv[2]` cases at once.

Run with a Python that has `pydantic-evals` (not a dependency of this project; see
`docs/performance.md`). Prints one JSON line: the seconds from this process's start to the
first request it sent (`first_request_s`, measured here) and the case count that answered.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time

START = time.time()

from pydantic import BaseModel, ConfigDict  # noqa: E402
from pydantic_ai import Agent, ToolOutput  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402
from pydantic_evals import Case, Dataset  # noqa: E402

SAMPLES = 40


class Answer(BaseModel):
    model_config = ConfigDict(extra="allow")
    metrics: list[dict[str, object]]
    evidence: list[dict[str, object]]


def main() -> None:
    url, concurrency = sys.argv[1], int(sys.argv[2])
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.execute("CREATE TABLE orders (order_id TEXT, order_status TEXT)")
    model = OpenAIChatModel("bench", provider=OpenAIProvider(base_url=url, api_key="x"))
    agent = Agent(model, output_type=ToolOutput(Answer, name="final_result_AnalystAnswer"))

    @agent.tool_plain
    def list_tables() -> list[str]:
        return [r[0] for r in db.execute("SELECT name FROM sqlite_master")]

    @agent.tool_plain
    def describe_table(name: str) -> str:
        return repr(db.execute(f"PRAGMA table_info({name})").fetchall())

    @agent.tool_plain
    def run_sql(sql: str) -> str:
        return repr(db.execute(sql).fetchall())

    async def task(question: str) -> Answer:
        return (await agent.run(question)).output

    question = "How many orders were delivered? Report `delivered_orders`."
    dataset = Dataset(
        name="slow-model", cases=[Case(name=f"c{i}", inputs=question) for i in range(SAMPLES)]
    )
    report = dataset.evaluate_sync(task, max_concurrency=concurrency, progress=False)
    print(json.dumps({"answered": len(report.cases), "failed": len(report.failures)}))


if __name__ == "__main__":
    main()
