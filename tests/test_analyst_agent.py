"""The default analyst agent: real tools on a real SQLite store, driven by FunctionModel."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import ModelRetry
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.openai import OpenAIChatModel

from analyst.agent import (
    OUTPUT_TOOL_NAMES,
    ModelAnalyst,
    build_agent,
    build_instructions,
    check_contract,
    dump_messages,
)
from analyst.models import API_KEY_ENV, ModelConfigError, model_analyst, model_api, resolve_model
from analyst.tools import read_skill, skill_catalog
from pytest_backintel.analyst_api import (
    Analyst,
    AnalystConfig,
    AnalystLimits,
    AnalystTask,
    AnalystTimeout,
    BudgetExceeded,
)
from pytest_backintel.contract import AnalystAnswer, Refusal
from stores.base import (
    MAX_RESULT_BYTES,
    MAX_ROWS,
    DatasetFiles,
    ProvisionedStore,
    QueryResult,
    StoreError,
    StoreSession,
    TableInfo,
)
from stores.sqlite.store import SQLiteStore

SQL = "SELECT COUNT(*) AS delivered_orders FROM orders WHERE status = 'delivered'"
ANSWER: dict[str, Any] = {
    "metrics": [{"name": "delivered_orders", "value": 2, "unit": "orders"}],
    "evidence": [{"id": "e1", "kind": "sql", "code": SQL, "metrics": ["delivered_orders"]}],
    "method": "count",
}
Script = Callable[[list[ModelMessage], AgentInfo], ModelResponse]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ProvisionedStore]:
    db = tmp_path / "shop.sqlite"
    conn = sqlite3.connect(db)
    conn.executescript(
        "CREATE TABLE orders (id INTEGER, status TEXT, amount REAL);"
        "INSERT INTO orders VALUES (1, 'delivered', 10.5), (2, 'delivered', 4.25),"
        " (3, 'canceled', 7.0);"
        "CREATE TABLE sellers (id INTEGER, name TEXT);"
        "INSERT INTO sellers VALUES (1, 'ana');"
    )
    conn.commit()
    conn.close()
    backend = SQLiteStore(tmp_path / "stores")
    provisioned = backend.provision(DatasetFiles("shop", tmp_path, sqlite_path=db))
    yield provisioned
    backend.teardown_session()


def task_for(store: ProvisionedStore, **limits: Any) -> AnalystTask:
    return AnalystTask(
        question="How many orders were delivered? Report delivered_orders.",
        connect=store.connect,
        store_label=store.display_id,
        limits=AnalystLimits(**limits),
    )


def last_returns(messages: list[ModelMessage]) -> list[Any]:
    """The parts of the latest request: what the model was just told."""
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    return list(last.parts)


def scripted(*steps: ToolCallPart | TextPart, seen: list[list[Any]] | None = None) -> Script:
    """A model that sends `steps` in order and records what each request showed it."""
    queue = list(steps)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if seen is not None:
            seen.append(last_returns(messages))
        return ModelResponse(parts=[queue.pop(0)])

    return respond


def call(tool: str, **args: Any) -> ToolCallPart:
    return ToolCallPart(tool, args)


def final(args: dict[str, Any] = ANSWER) -> ToolCallPart:
    return ToolCallPart(OUTPUT_TOOL_NAMES[0], args)


def test_agent_offers_the_tools_and_one_output_tool_per_contract_member(
    store: ProvisionedStore,
) -> None:
    infos: list[AgentInfo] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        infos.append(info)
        return ModelResponse(parts=[ToolCallPart(OUTPUT_TOOL_NAMES[1], {"missing": ["x"]})])

    analyst = ModelAnalyst(FunctionModel(respond))
    run = analyst.answer(task_for(store))
    # a refusal without `explanation` is not the contract: the model is asked again, then fails
    assert run.output is None
    assert run.error is not None
    assert "contract answer" in run.error
    info = infos[0]
    assert [t.name for t in info.output_tools] == list(OUTPUT_TOOL_NAMES)
    assert [t.name for t in info.function_tools] == [
        "list_tables",
        "describe_table",
        "run_sql",
        "load_skill",
    ]
    assert not info.allow_text_output
    assert info.instructions == build_instructions()


def test_model_analyst_runs_the_real_tools_end_to_end(store: ProvisionedStore) -> None:
    seen: list[list[Any]] = []
    model = FunctionModel(
        scripted(
            call("list_tables"),
            call("describe_table", name="orders"),
            call("run_sql", sql=SQL),
            final(),
            seen=seen,
        )
    )
    analyst = ModelAnalyst(model, name="scripted")
    assert isinstance(analyst, Analyst)
    assert (analyst.name, analyst.kind) == ("scripted", "model")
    run = analyst.answer(task_for(store))

    assert isinstance(run.output, AnalystAnswer)
    assert run.output.metrics[0].value == 2
    assert run.error is None
    assert seen[1][0].content == ["orders", "sellers"]
    assert "table orders: 3 rows" in seen[2][0].content
    assert "status\tTEXT" in seen[2][0].content
    assert seen[3][0].content == "delivered_orders\n2\n[1 row(s)]"
    assert run.tool_calls == [
        {"tool": "list_tables", "args": {}},
        {"tool": "describe_table", "args": {"name": "orders"}},
        {"tool": "run_sql", "args": {"sql": SQL}},
    ]
    assert (run.usage.requests, run.usage.tool_calls) == (4, 3)
    assert run.usage.input_tokens > 0
    assert run.usage.output_tokens > 0


def test_messages_dump_round_trips(store: ProvisionedStore) -> None:
    model = FunctionModel(scripted(call("run_sql", sql=SQL), final()))
    run = ModelAnalyst(model).answer(task_for(store))
    loaded = ModelMessagesTypeAdapter.validate_python(run.messages)
    assert dump_messages(loaded) == run.messages
    kinds = [type(m).__name__ for m in loaded]
    assert kinds == [
        "ModelRequest",
        "ModelResponse",
        "ModelRequest",
        "ModelResponse",
        "ModelRequest",
    ]


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELEC nonsense", "ERROR (QueryError): SQLite error"),
        ("SELECT * FROM nowhere", "ERROR (QueryError): no such table"),
        ("DELETE FROM orders", "ERROR (QueryRefused): run_sql is read-only"),
        ("CREATE TABLE t (x INTEGER)", "ERROR (QueryRefused): run_sql is read-only"),
    ],
)
def test_query_errors_reach_the_model_and_the_run_continues(
    store: ProvisionedStore, sql: str, expected: str
) -> None:
    seen: list[list[Any]] = []
    model = FunctionModel(
        scripted(
            call("run_sql", sql=sql),
            call("describe_table", name="nowhere"),
            call("run_sql", sql=SQL),
            final(),
            seen=seen,
        )
    )
    run = ModelAnalyst(model).answer(task_for(store))
    assert isinstance(run.output, AnalystAnswer)
    error = seen[1][0]
    assert isinstance(error, ToolReturnPart)
    assert str(error.content).startswith(expected)
    assert seen[2][0].content.startswith("ERROR describing table 'nowhere': unknown table")
    assert seen[3][0].content == "delivered_orders\n2\n[1 row(s)]"
    with store.connect() as session:
        assert session.run_sql("SELECT COUNT(*) FROM orders").rows == [(3,)]


class ThreadRecorder(StoreSession):
    """A real session that notes which thread each call ran on."""

    def __init__(self, inner: StoreSession) -> None:
        self.inner = inner
        self.threads = {threading.get_ident()}
        self.closed = False

    def list_tables(self) -> list[str]:
        self.threads.add(threading.get_ident())
        return self.inner.list_tables()

    def describe_table(self, name: str) -> TableInfo:
        self.threads.add(threading.get_ident())
        return self.inner.describe_table(name)

    def run_sql(
        self, sql: str, max_rows: int = MAX_ROWS, max_bytes: int = MAX_RESULT_BYTES
    ) -> QueryResult:
        self.threads.add(threading.get_ident())
        return self.inner.run_sql(sql, max_rows, max_bytes)

    def close(self) -> None:
        self.threads.add(threading.get_ident())
        self.closed = True
        self.inner.close()


def test_one_session_on_one_thread_closed_after_the_run(store: ProvisionedStore) -> None:
    sessions: list[ThreadRecorder] = []

    def connect() -> StoreSession:
        sessions.append(ThreadRecorder(store.connect()))
        return sessions[-1]

    steps = [call("list_tables"), call("run_sql", sql=SQL), call("run_sql", sql=SQL), final()]
    task = replace(task_for(store), connect=connect)
    run = ModelAnalyst(FunctionModel(scripted(*steps))).answer(task)
    assert isinstance(run.output, AnalystAnswer)
    (session,) = sessions
    assert session.closed
    assert len(session.threads) == 1
    assert threading.get_ident() not in session.threads


def test_store_failure_is_not_swallowed(store: ProvisionedStore) -> None:
    store.teardown()
    model = FunctionModel(scripted(call("list_tables"), final()))
    with pytest.raises(StoreError, match="torn down"):
        ModelAnalyst(model).answer(task_for(store))


def test_load_skill_returns_a_skill_on_demand(store: ProvisionedStore) -> None:
    seen: list[list[Any]] = []
    model = FunctionModel(
        scripted(
            call("load_skill", name="evidence-contract"),
            call("load_skill", name="no-such-skill"),
            final(),
            seen=seen,
        )
    )
    run = ModelAnalyst(model).answer(task_for(store))
    assert isinstance(run.output, AnalystAnswer)
    assert seen[1][0].content == read_skill("evidence-contract")
    assert "# Evidence that reproduces" in seen[1][0].content
    assert seen[2][0].content.startswith("ERROR: no skill named 'no-such-skill'")
    assert "refusals" in seen[2][0].content


def test_prompt_lists_skills_but_not_their_bodies() -> None:
    skills = skill_catalog()
    assert {s.name for s in skills} >= {"evidence-contract", "refusals", "data-quality"}
    prompt = build_instructions()
    for skill in skills:
        assert f"- `{skill.name}`: {skill.description}" in prompt
        first_rule = next(line for line in skill.body.splitlines() if line.startswith("- "))
        assert first_rule not in prompt


def test_a_skill_without_front_matter_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "good.md").write_text("---\ndescription: fine.\n---\n# Good\n")
    assert [s.name for s in skill_catalog(tmp_path)] == ["good"]
    (tmp_path / "bad.md").write_text("# Bad\nno front matter\n")
    with pytest.raises(ValueError, match=r"bad\.md"):
        skill_catalog(tmp_path)


def test_an_answer_that_breaks_the_contract_is_sent_back(store: ProvisionedStore) -> None:
    uncited = {**ANSWER, "evidence": [{**ANSWER["evidence"][0], "metrics": []}]}
    seen: list[list[Any]] = []
    model = FunctionModel(scripted(final(uncited), final(), seen=seen))
    run = ModelAnalyst(model).answer(task_for(store))
    assert isinstance(run.output, AnalystAnswer)
    retry = seen[1][0]
    assert isinstance(retry, ToolReturnPart)
    assert retry.outcome == "retried"
    assert "not cited by any evidence item: delivered_orders" in str(retry.content)


def _answer(**changes: Any) -> AnalystAnswer:
    return AnalystAnswer.model_validate({**ANSWER, **changes})


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (_answer(metrics=ANSWER["metrics"] * 2), "reported more than once: delivered_orders"),
        (
            _answer(evidence=[{**ANSWER["evidence"][0], "metrics": ["delivered_orders", "x"]}]),
            "cites metrics that are not reported: x",
        ),
        (_answer(evidence=ANSWER["evidence"] * 2), "evidence ids must be unique"),
    ],
)
def test_contract_check_rejects_what_the_model_can_fix(answer: AnalystAnswer, problem: str) -> None:
    with pytest.raises(ModelRetry, match=problem):
        check_contract(answer)
    assert check_contract(_answer()) == _answer()
    refusal = Refusal(missing=["x"], explanation="y")
    assert check_contract(refusal) is refusal


def test_text_without_a_contract_answer_is_an_error_not_a_crash(store: ProvisionedStore) -> None:
    model = FunctionModel(scripted(*[TextPart("about 2, I think")] * 5))
    run = ModelAnalyst(model).answer(task_for(store))
    assert run.output is None
    assert run.error is not None
    assert run.messages
    assert run.usage.requests >= 2


def looping(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart("list_tables", {})])


@pytest.mark.parametrize(
    ("limits", "match"),
    [({"max_tool_calls": 3}, "tool_calls_limit"), ({"max_requests": 2}, "request_limit")],
)
def test_usage_limits_raise_budget_exceeded(
    store: ProvisionedStore, limits: dict[str, int], match: str
) -> None:
    with pytest.raises(BudgetExceeded, match=match):
        ModelAnalyst(FunctionModel(looping)).answer(task_for(store, **limits))


def test_the_same_run_within_its_limits_succeeds(store: ProvisionedStore) -> None:
    model = FunctionModel(scripted(call("list_tables"), call("list_tables"), final()))
    run = ModelAnalyst(model).answer(task_for(store, max_tool_calls=2, max_requests=3))
    assert isinstance(run.output, AnalystAnswer)


def test_wall_time_raises_analyst_timeout(store: ProvisionedStore) -> None:
    async def slow(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(30)
        raise AssertionError("unreachable")

    with pytest.raises(AnalystTimeout, match=r"0\.2s"):
        ModelAnalyst(FunctionModel(slow)).answer(task_for(store, wall_time_s=0.2))


def test_answer_works_from_inside_a_running_event_loop(store: ProvisionedStore) -> None:
    analyst = ModelAnalyst(FunctionModel(scripted(call("list_tables"), final())))

    async def main() -> Any:
        return analyst.answer(task_for(store))

    assert isinstance(asyncio.run(main()).output, AnalystAnswer)


def test_refusal_is_a_contract_answer(store: ProvisionedStore) -> None:
    refusal = {"missing": ["an expense table"], "explanation": "no costs"}
    model = FunctionModel(scripted(ToolCallPart(OUTPUT_TOOL_NAMES[1], refusal)))
    run = ModelAnalyst(model).answer(task_for(store))
    assert run.output == Refusal(missing=["an expense table"], explanation="no costs")


def test_build_agent_builds_fresh_agents_without_a_model() -> None:
    assert build_agent() is not build_agent()


# -- model resolution ---------------------------------------------------------------------


def test_base_url_gives_an_openai_chat_model_at_that_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    model = resolve_model("llama3.2", "http://127.0.0.1:11434/v1")
    assert isinstance(model, OpenAIChatModel)
    assert model.model_name == "llama3.2"
    assert model.base_url == "http://127.0.0.1:11434/v1/"
    assert model.client.api_key == "not-needed"
    monkeypatch.setenv(API_KEY_ENV, "sk-local")
    keyed = resolve_model("llama3.2", "http://127.0.0.1:11434/v1")
    assert isinstance(keyed, OpenAIChatModel)
    assert keyed.client.api_key == "sk-local"


def test_model_string_is_passed_through_and_checked() -> None:
    # `openai:` goes through Chat Completions with or without a base URL; the user may choose
    # the Responses API with `openai-responses:`
    assert resolve_model("openai:gpt-5.1") == "openai-chat:gpt-5.1"
    assert resolve_model("openai-responses:gpt-5.1") == "openai-responses:gpt-5.1"
    assert resolve_model("anthropic:claude-sonnet-4-5") == "anthropic:claude-sonnet-4-5"
    assert model_api("openai:gpt-5.1") == model_api("openai:qwen3", "http://h/v1")
    assert model_api("openai:qwen3", "http://h/v1") == "chat_completions"
    assert model_api("openai-responses:gpt-5.1") == "responses"
    assert model_api("anthropic:claude-sonnet-4-5") == "anthropic"
    at_server = resolve_model("openai:qwen3", "http://127.0.0.1:11434/v1")
    assert isinstance(at_server, OpenAIChatModel)
    assert at_server.model_name == "qwen3", "a server gets the bare model name"
    ollama = resolve_model("qwen3:32b", "http://127.0.0.1:11434/v1")
    assert isinstance(ollama, OpenAIChatModel)
    assert ollama.model_name == "qwen3:32b", "a server's own name with a colon is kept"
    with pytest.raises(ModelConfigError, match="no provider prefix"):
        resolve_model("gpt-5.1")
    with pytest.raises(ModelConfigError, match="no provider 'nope'"):
        resolve_model("nope:x")
    with pytest.raises(ModelConfigError, match="must start with http"):
        resolve_model("llama3.2", "127.0.0.1:11434")


def test_model_analyst_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ModelConfigError, match="no model configured"):
        model_analyst(AnalystConfig())
    analyst = model_analyst(AnalystConfig(model="qwen3", model_base_url="http://localhost:8000/v1"))
    assert (analyst.name, analyst.kind) == ("qwen3", "model")
    assert isinstance(analyst.model, OpenAIChatModel)
    named = model_analyst(AnalystConfig(model="openai:gpt-5.1"))
    assert (named.name, named.model) == ("openai:gpt-5.1", "openai-chat:gpt-5.1")


def test_a_model_string_is_resolved_on_first_use_and_never_called_here(
    store: ProvisionedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    analyst = model_analyst(AnalystConfig(model="openai:gpt-5.1"))
    with pytest.raises(RuntimeError, match="ALLOW_MODEL_REQUESTS is False"):
        analyst.answer(task_for(store))
    assert analyst._resolved is not None
    assert (analyst._resolved.system, analyst._resolved.model_name) == ("openai", "gpt-5.1")
