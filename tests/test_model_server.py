"""The real provider path: Pydantic AI's OpenAI provider and the real `openai` client talking
HTTP to the scripted OpenAI-compatible test server, with its misbehaviours.

Each test drives `ModelAnalyst` (as `--model openai:<name> --model-base-url URL` builds it)
against a real SQLite store and `run_trial`, so what is checked is what a run records.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import ANSWER, SQL, orders_store

from analyst.agent import ModelAnalyst
from analyst.models import model_analyst, resolve_model
from analyst.retries import RetryPolicy
from pytest_backintel.analyst_api import (
    AnalystConfig,
    AnalystLimits,
    AnalystTask,
    AnalystTimeout,
    ProviderError,
)
from pytest_backintel.contract import AnalystAnswer
from pytest_backintel.testing.model_server import Failure, ModelServer, Step, unused_url
from stores.base import ProvisionedStore

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "How many orders are there? Report metric `n_orders`."
FAST = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.2)
"""Short waits, so the retry tests take a fraction of a second."""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ProvisionedStore]:
    backend, provisioned = orders_store(tmp_path, rows=2)
    yield provisioned
    backend.teardown_session()


def analyst_at(server: ModelServer, policy: RetryPolicy = FAST) -> ModelAnalyst:
    return ModelAnalyst(resolve_model("openai:qwen3", server.url), retry_policy=policy)


def task(store: ProvisionedStore, **limits: Any) -> AnalystTask:
    return AnalystTask(QUESTION, store.connect, store.display_id, AnalystLimits(**limits))


def good_steps(*first_failures: Failure) -> list[Step]:
    """list_tables (its first attempts failing so), run_sql, the answer; token counts differ
    per step so sums are exact."""
    return [
        Step.call("list_tables", usage=(1000, 11), failures=first_failures),
        Step.call("run_sql", {"sql": SQL}, usage=(1200, 22)),
        Step.answer(ANSWER["metrics"], ANSWER["evidence"], usage=(1500, 33)),
    ]


def test_a_scripted_answer_comes_back_with_the_servers_exact_token_counts(
    model_server: ModelServer, store: ProvisionedStore
) -> None:
    model_server.script("`n_orders`", good_steps())
    run = analyst_at(model_server).answer(task(store))
    assert isinstance(run.output, AnalystAnswer)
    assert run.output.metrics[0].value == 2
    assert (run.usage.requests, run.usage.input_tokens, run.usage.output_tokens) == (3, 3700, 66)
    assert run.usage.tokens_reported
    assert [c["tool"] for c in run.tool_calls] == ["list_tables", "run_sql"]
    assert {r.model for r in model_server.requests} == {"qwen3"}, "the bare name is sent"
    assert all(r.path == "/v1/chat/completions" for r in model_server.requests)
    assert run.provider_retries == []


@pytest.mark.parametrize(
    ("failure", "error"),
    [
        (Failure.http(500), "ModelServerError"),
        (Failure.http(503), "ModelUnavailableError"),
        (Failure.rate_limited(0.05), "ModelRateLimitError"),
        (Failure.dropped(), "ModelConnectionError"),
    ],
)
def test_a_failing_provider_is_provider_error_after_bounded_recorded_retries(
    model_server: ModelServer, store: ProvisionedStore, failure: Failure, error: str
) -> None:
    model_server.script("`n_orders`", [Step.call("list_tables", failures=(failure,) * 10)])
    with pytest.raises(ProviderError, match="provider failed after 3 recorded attempt") as info:
        analyst_at(model_server).answer(task(store))
    run = info.value.run
    assert run is not None
    assert [r["attempt"] for r in run.provider_retries] == [1, 2, 3]
    assert all(error in r["error"] for r in run.provider_retries)
    assert run.provider_retries[-1]["wait_s"] is None, "no wait after the last attempt"
    assert len(model_server.requests) == 3, "the SDK's own retries are off: every try is seen"


def test_a_rate_limit_waits_the_retry_after_it_asks_for_then_goes_on(
    model_server: ModelServer, store: ProvisionedStore
) -> None:
    model_server.script("`n_orders`", good_steps(Failure.rate_limited(0.15)))
    run = analyst_at(model_server).answer(task(store))
    assert isinstance(run.output, AnalystAnswer)
    (retry,) = run.provider_retries
    assert (retry["status"], retry["retry_after_s"], retry["wait_s"]) == (429, 0.15, 0.15)
    assert run.usage.requests == 3, "only answered requests are counted"


def test_retry_after_is_capped(model_server: ModelServer, store: ProvisionedStore) -> None:
    model_server.script("`n_orders`", good_steps(Failure.rate_limited(3600)))
    run = analyst_at(model_server).answer(task(store))
    assert run.provider_retries[0]["retry_after_s"] == 3600
    assert run.provider_retries[0]["wait_s"] == FAST.max_delay_s


def test_a_rejected_request_is_not_retried(
    model_server: ModelServer, store: ProvisionedStore
) -> None:
    model_server.script("`n_orders`", [Step.call("list_tables", failures=(Failure.http(401),))])
    with pytest.raises(ProviderError) as info:
        analyst_at(model_server).answer(task(store))
    assert info.value.run is not None
    assert [r["status"] for r in info.value.run.provider_retries] == [401]


def test_a_refused_connection_is_provider_error(store: ProvisionedStore) -> None:
    from pydantic_ai.models import override_allow_model_requests

    analyst = ModelAnalyst(resolve_model("openai:qwen3", unused_url()), retry_policy=FAST)
    with override_allow_model_requests(True), pytest.raises(ProviderError) as info:
        analyst.answer(task(store))
    assert info.value.run is not None
    assert len(info.value.run.provider_retries) == 3


def test_a_hanging_request_times_out_keeping_the_two_answered_requests_tokens(
    model_server: ModelServer, store: ProvisionedStore
) -> None:
    steps = good_steps()
    steps[2] = Step.answer([], [], failures=(Failure.hang(),))
    model_server.script("`n_orders`", steps)
    with pytest.raises(AnalystTimeout) as info:
        analyst_at(model_server).answer(task(store, wall_time_s=2.0))
    run = info.value.run
    assert run is not None
    assert (run.usage.requests, run.usage.input_tokens, run.usage.output_tokens) == (2, 2200, 33)
    assert [c["tool"] for c in run.tool_calls] == ["list_tables", "run_sql"]
    assert model_server.requests[-1].reply == "hang"


@pytest.mark.parametrize(
    "misstep",
    [
        Step.call("run_sql", '{"sql": "SELECT 1'),  # malformed JSON arguments
        Step.prose("There are probably two orders."),  # prose instead of a tool call
        Step.call("drop_everything", {"table": "orders"}),  # a tool that does not exist
    ],
    ids=["malformed-args", "prose", "unknown-tool"],
)
def test_a_misbehaving_model_is_told_and_its_next_answer_counts(
    model_server: ModelServer, store: ProvisionedStore, misstep: Step
) -> None:
    model_server.script("`n_orders`", [misstep, *good_steps()])
    run = analyst_at(model_server).answer(task(store))
    assert isinstance(run.output, AnalystAnswer)
    assert run.usage.requests == 4
    assert run.usage.input_tokens == 100 + 3700, "the misstep's tokens are counted too"


def test_a_provider_without_usage_gives_unknown_tokens_not_zero(
    model_server: ModelServer, store: ProvisionedStore
) -> None:
    steps = [Step(s.tool_calls, usage=None) for s in good_steps()]
    model_server.script("`n_orders`", steps)
    run = analyst_at(model_server).answer(task(store))
    assert isinstance(run.output, AnalystAnswer)
    assert not run.usage.tokens_reported
    assert run.usage.to_json()["input_tokens"] is None
    assert run.usage.to_json()["output_tokens"] is None


def test_latency_is_waited_for(model_server: ModelServer, store: ProvisionedStore) -> None:
    steps = good_steps()
    steps[0] = Step(steps[0].tool_calls, usage=steps[0].usage, delay_s=0.3)
    model_server.script("`n_orders`", steps)
    run = analyst_at(model_server).answer(task(store))
    assert isinstance(run.output, AnalystAnswer)


def test_the_model_check_names_an_unreachable_server() -> None:
    analyst = model_analyst(AnalystConfig(model="openai:qwen3", model_base_url=unused_url()))
    with pytest.raises(Exception, match="nothing answers there"):
        analyst.check()


def test_the_model_check_names_the_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    analyst = model_analyst(AnalystConfig(model="anthropic:claude-sonnet-4-5"))
    with pytest.raises(Exception, match="ANTHROPIC_API_KEY"):
        analyst.check()


def test_the_built_in_analyst_puts_the_tasks_own_rules_in_front_of_the_model(
    model_server: ModelServer, tmp_path: Path
) -> None:
    """A real item (`--model openai:… --model-base-url`): the harness builds the task, and the
    request the server receives holds `task.rules` (the text a custom analyst gets) in the
    user turn; the system prompt has no copy of the comparison rules that could drift."""
    from pytest_backintel.collect.loading import find_scenarios
    from pytest_backintel.scoring.rules import answer_rules

    path, scenario = find_scenarios()["l1-delivered-orders"]
    model_server.script("`delivered_orders`", [Step.prose("no idea")] * 8)
    command = [sys.executable, "-m", "pytest", str(path), "-p", "no:xdist", "-q"]
    command += ["-k", "l1-delivered-orders", "--model", "openai:bench"]
    command += ["--model-base-url", model_server.url, f"--results-dir={tmp_path}"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    assert model_server.requests, done.stdout[-2000:] + done.stderr[-2000:]
    rules = answer_rules(scenario)
    assert "full precision" in rules
    assert "major currency units" in rules
    for request in model_server.requests:
        user = [m["content"] for m in request.messages if m.get("role") == "user"]
        system = [m["content"] for m in request.messages if m.get("role") == "system"]
        assert any(scenario.question in u and rules in u for u in user), user
        assert system
        assert not any(rules[:60] in s for s in system)


SERVE = "uv run python -m pytest_backintel.testing.model_server --scripts scripts.json --port {}"
RUN = (
    "uv run pytest scenarios -k delivered-orders --model openai:scripted "
    "--model-base-url http://127.0.0.1:{}/v1"
)


def test_the_server_runs_from_the_command_line_as_the_readme_shows(tmp_path: Path) -> None:
    """The README's scripts file and both commands, in the own-data tutorial's project: the
    scripted model's answer is scored, and the server counted its requests."""
    import json
    import re
    import socket

    from test_own_data import backintel, project

    readme = (ROOT / "README.md").read_text()
    assert SERVE.format(8765) in readme
    assert RUN.format(8765) in readme
    scripts = re.search(r"```json\n(.*?)```", readme, re.DOTALL)
    assert scripts is not None
    folder = project(tmp_path)
    (folder / "scripts.json").write_text(scripts.group(1))
    assert backintel(folder, "references", "build").returncode == 0
    with socket.socket() as sock:  # a free port, in place of the README's 8765
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = SERVE.format(port).split()[3:]  # `uv run python` is this interpreter
    server = subprocess.Popen(
        [sys.executable, *argv], cwd=folder, stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == f"http://127.0.0.1:{port}/v1"
        argv = RUN.format(port).split()[3:]
        done = subprocess.run(
            [str(Path(sys.executable).parent / "pytest"), *argv, "-p", "no:xdist", "--run-id", "m"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        record = json.loads((folder / "results" / "m" / "records.jsonl").read_text())
        assert (record["outcome"], record["model"]) == ("pass", "openai:scripted")
        assert record["usage"]["requests"] == 2
    finally:
        server.terminate()
        out, _ = server.communicate(timeout=30)
    assert server.returncode == 0
    assert "served 2 request(s)" in out
