"""The model gateway (`pytest_backintel.run.gateway`) with the real `openai` and `anthropic`
clients as the agent and the scripted model server as the provider: every API whole and
streamed, metered exactly; tokens refused unless they belong to a live trial; budgets; retries
and `provider_error`; in-flight requests of a closed trial; the Unix socket."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest

from pytest_backintel.analyst_api import AnalystLimits, Usage
from pytest_backintel.options import RunLimits
from pytest_backintel.run.budget import RunBudget
from pytest_backintel.run.gateway import (
    GatewayConfigError,
    ModelGateway,
    RetryPolicy,
    TrialKey,
    Upstream,
)
from pytest_backintel.testing.model_server import Failure, ModelServer, Step

FAST = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.2)
PROMPT = "How many orders were delivered?"
STEPS = [
    Step.call("list_tables", usage=(101, 7)),
    Step.call("run_sql", {"sql": "SELECT 1"}, usage=(233, 19)),
    Step.prose("42 orders", usage=(377, 31)),
]


@pytest.fixture
def gateway(model_server: ModelServer) -> Iterator[ModelGateway]:
    with ModelGateway(Upstream.resolve("openai:qwen3", model_server.url), retry=FAST) as gw:
        yield gw


def oa(gw: ModelGateway, key: TrialKey | str) -> openai.OpenAI:
    token = key.token if isinstance(key, TrialKey) else key
    return openai.OpenAI(base_url=gw.openai_base_url, api_key=token, max_retries=0)


def an(gw: ModelGateway, key: TrialKey) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.base_url, api_key=key.token, max_retries=0)


def turn(api: str, gw: ModelGateway, key: TrialKey, step: int, stream: bool) -> tuple[int, int]:
    """The agent's request at `step` of the conversation in `api`; the usage it saw."""
    if api == "chat":
        history: list[Any] = [{"role": "user", "content": PROMPT}]
        history += [{"role": "assistant", "content": "…"}] * step
        if not stream:
            usage = oa(gw, key).chat.completions.create(model="gpt-4o", messages=history).usage
            assert usage is not None
            return usage.prompt_tokens, usage.completion_tokens
        chunks = list(
            oa(gw, key).chat.completions.create(model="gpt-4o", messages=history, stream=True)
        )
        last = chunks[-1].usage
        assert last is not None, "the gateway asks for the closing usage chunk"
        return last.prompt_tokens, last.completion_tokens
    if api == "responses":
        items: list[Any] = [{"role": "user", "content": PROMPT}]
        items += [{"role": "assistant", "content": "…"}, {"role": "user", "content": "go"}] * step
        if stream:
            with oa(gw, key).responses.stream(model="gpt-4o", input=items) as events:
                counted = events.get_final_response().usage
        else:
            counted = oa(gw, key).responses.create(model="gpt-4o", input=items).usage
        assert counted is not None
        return counted.input_tokens, counted.output_tokens
    messages: list[Any] = [{"role": "user", "content": PROMPT}]
    messages += [{"role": "assistant", "content": "…"}, {"role": "user", "content": "go"}] * step
    client = an(gw, key)
    if stream:
        with client.messages.stream(model="claude", max_tokens=64, messages=messages) as events:
            used = events.get_final_message().usage
    else:
        used = client.messages.create(model="claude", max_tokens=64, messages=messages).usage
    return used.input_tokens, used.output_tokens


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_every_api_is_forwarded_and_metered_exactly(
    api: str, stream: bool, model_server: ModelServer, gateway: ModelGateway
) -> None:
    model_server.script("orders were delivered", STEPS)
    key = gateway.open_trial("delivered/t1", AnalystLimits())
    seen = [turn(api, gateway, key, step, stream) for step in range(3)]
    usage = gateway.close_trial(key)
    assert seen == [s.usage for s in STEPS]
    assert (usage.requests, usage.input_tokens, usage.output_tokens) == (3, 711, 57)
    assert usage.tokens_reported
    assert usage.stopped is None
    assert [r.model for r in model_server.requests] == ["qwen3"] * 3, "the configured model"
    assert [r.reply for r in model_server.requests] == ["ok"] * 3
    assert [e["api"] for e in usage.exchanges] == [api] * 3
    assert all(e["request"]["model"] in ("gpt-4o", "claude") for e in usage.exchanges)
    assert usage.to_usage(tool_calls=2) == Usage(3, 711, 57, 2, True)


def test_unpriced_and_priced_models(model_server: ModelServer) -> None:
    model_server.script("orders were delivered", STEPS)
    with ModelGateway(Upstream.resolve("openai:gpt-4o", model_server.url)) as gw:
        key = gw.open_trial("t/t1", AnalystLimits())
        turn("chat", gw, key, 0, False)
        priced = gw.close_trial(key)
    assert priced.cost_usd is not None
    assert priced.cost_usd > 0
    with ModelGateway(Upstream.resolve("openai:qwen3", model_server.url)) as gw:
        key = gw.open_trial("t/t1", AnalystLimits())
        turn("chat", gw, key, 0, False)
        assert gw.close_trial(key).cost_usd is None, "no price: unknown, never 0"


def test_a_response_without_usage_leaves_tokens_unknown(
    model_server: ModelServer, gateway: ModelGateway
) -> None:
    model_server.script("orders were delivered", [Step.prose("42", usage=None)])
    key = gateway.open_trial("t/t1", AnalystLimits())
    oa(gateway, key).chat.completions.create(
        model="m", messages=[{"role": "user", "content": PROMPT}]
    )
    usage = gateway.close_trial(key)
    assert usage.requests == 1
    assert not usage.tokens_reported
    assert usage.cost_usd is None
    assert usage.to_json()["input_tokens"] is None


def test_requests_without_a_live_trials_token_are_refused_and_kept(
    model_server: ModelServer, gateway: ModelGateway
) -> None:
    model_server.script("orders were delivered", STEPS)
    ended = gateway.open_trial("ended/t1", AnalystLimits())
    gateway.close_trial(ended)
    live = gateway.open_trial("live/t1", AnalystLimits())
    ask: list[Any] = [{"role": "user", "content": PROMPT}]
    for token in ("", "sk-made-up", ended.token):
        with pytest.raises(openai.AuthenticationError) as caught:
            oa(gateway, token or "x").chat.completions.create(model="m", messages=ask)
        assert caught.value.status_code == 401
    bare = httpx.post(f"{gateway.openai_base_url}/chat/completions", json={"messages": ask})
    assert bare.status_code == 401
    assert "no API key" in bare.json()["error"]["message"]
    reasons = [(r["reason"].split(":")[0], r["trial_id"]) for r in gateway.refusals]
    assert reasons == [
        ("unknown API key", None),
        ("unknown API key", None),
        ("this token's trial (ended/t1) has ended", "ended/t1"),
        ("no API key", None),
    ]
    assert model_server.requests == [], "nothing refused reached the provider"
    assert gateway.close_trial(live).requests == 0


def test_the_trial_request_budget_refuses_with_the_option_named(
    model_server: ModelServer, gateway: ModelGateway
) -> None:
    model_server.script("orders were delivered", STEPS)
    key = gateway.open_trial("t/t1", AnalystLimits(max_requests=2))
    turn("chat", gateway, key, 0, False)
    turn("chat", gateway, key, 1, False)
    with pytest.raises(openai.PermissionDeniedError, match="--max-requests 2"):
        turn("chat", gateway, key, 2, False)
    usage = gateway.close_trial(key)
    assert usage.requests == 2
    assert len(model_server.requests) == 2
    assert usage.budget_exceeded is not None
    assert "--max-requests 2" in usage.budget_exceeded
    assert usage.refused[0]["status"] == 403


def test_the_trial_token_budget_stops_after_the_response_that_crosses_it(
    model_server: ModelServer, gateway: ModelGateway
) -> None:
    model_server.script("orders were delivered", STEPS)
    key = gateway.open_trial("t/t1", AnalystLimits(max_tokens=108))
    turn("messages", gateway, key, 0, True)  # 108 tokens: at the limit, not over it
    assert gateway.usage(key).budget_exceeded is None
    turn("messages", gateway, key, 1, True)  # 360: over
    with pytest.raises(anthropic.PermissionDeniedError, match="--max-tokens 108"):
        turn("messages", gateway, key, 2, True)
    usage = gateway.close_trial(key)
    assert (usage.requests, usage.tokens) == (2, 360)
    assert len(model_server.requests) == 2


def test_the_run_budget_counts_finished_and_live_trials(
    tmp_path: Path, model_server: ModelServer
) -> None:
    model_server.script("orders were delivered", STEPS)
    budget = RunBudget(tmp_path, RunLimits(max_tokens=500))
    budget.reset()
    budget.charge(Usage(requests=1, input_tokens=300, output_tokens=0), None)  # a finished trial
    upstream = Upstream.resolve("openai:qwen3", model_server.url)
    with ModelGateway(upstream, budget=budget) as gw:
        first, second = (gw.open_trial(f"t/t{n}", AnalystLimits()) for n in (1, 2))
        turn("chat", gw, first, 0, False)  # 300 + 108
        turn("chat", gw, second, 1, False)  # 408 + 252 ≥ 500: the run is spent
        with pytest.raises(openai.PermissionDeniedError, match="--run-max-tokens 500"):
            turn("chat", gw, first, 1, False)
        assert gw.close_trial(first).budget_exceeded is not None
        assert gw.close_trial(second).budget_exceeded is None
    assert len(model_server.requests) == 2


def test_provider_failures_are_retried_then_blocked(
    model_server: ModelServer, gateway: ModelGateway
) -> None:
    flaky = Step.call("list_tables", usage=(50, 5), failures=(Failure.http(503), Failure.dropped()))
    model_server.script("orders were delivered", [flaky])
    key = gateway.open_trial("t/t1", AnalystLimits())
    assert turn("chat", gateway, key, 0, False) == (50, 5)
    usage = gateway.close_trial(key)
    assert [r["attempt"] for r in usage.provider_retries] == [1, 2]
    assert usage.provider_retries[0]["status"] == 503
    assert usage.provider_error is None

    model_server.reset()
    model_server.script("orders were delivered", STEPS)
    model_server.fail_next(3, Failure.rate_limited(0.05))
    key = gateway.open_trial("t/t2", AnalystLimits())
    with pytest.raises(openai.InternalServerError) as caught:
        turn("chat", gateway, key, 0, False)
    assert caught.value.status_code == 502
    with pytest.raises(openai.PermissionDeniedError):  # the trial is blocked: no more requests
        turn("chat", gateway, key, 0, False)
    usage = gateway.close_trial(key)
    assert usage.provider_error is not None
    assert "3 attempt(s)" in usage.provider_error
    assert [r["retry_after_s"] for r in usage.provider_retries] == [0.05] * 3
    assert [r["wait_s"] for r in usage.provider_retries] == [0.05, 0.05, None]
    assert usage.requests == 0
    assert len(model_server.requests) == 3


def test_a_rejected_key_is_a_provider_error_and_the_key_stays_hidden(
    model_server: ModelServer,
) -> None:
    model_server.script("orders were delivered", [Step.prose("x", failures=(Failure.http(401),))])
    secret = "sk-harness-only-0123456789"
    upstream = Upstream.resolve(
        "openai:qwen3", model_server.url, {"BACKINTEL_MODEL_API_KEY": secret}
    )
    with ModelGateway(upstream, retry=FAST) as gw:
        key = gw.open_trial("t/t1", AnalystLimits())
        assert secret not in repr(upstream)
        assert secret not in str(gw.agent_env(key))
        with pytest.raises(openai.InternalServerError) as caught:
            turn("chat", gw, key, 0, False)
        assert secret not in caught.value.response.text
        usage = gw.close_trial(key)
    assert usage.provider_error is not None
    assert "HTTP 401" in usage.provider_error
    assert secret not in str(usage.to_json())
    assert secret not in str(usage.exchanges)


def test_closing_a_trial_cancels_its_request_in_flight(
    model_server: ModelServer, gateway: ModelGateway
) -> None:
    model_server.script("orders were delivered", [Step.prose("x", failures=(Failure.hang(),))])
    key = gateway.open_trial("t/t1", AnalystLimits())
    outcome: list[BaseException] = []

    def agent() -> None:
        try:
            turn("chat", gateway, key, 0, False)
        except openai.APIError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=agent)
    thread.start()
    while not model_server.requests:
        threading.Event().wait(0.01)
    usage = gateway.close_trial(key)
    thread.join(10)
    assert [r["status"] for r in usage.refused] == [499]
    assert isinstance(outcome[0], openai.AuthenticationError)


def test_the_unix_socket_serves_the_same_gateway(tmp_path: Path, model_server: ModelServer) -> None:
    model_server.script("orders were delivered", STEPS)
    path = tmp_path / "gw.sock"
    with ModelGateway(Upstream.resolve("openai:qwen3", model_server.url), socket_path=path) as gw:
        key = gw.open_trial("t/t1", AnalystLimits())
        transport = httpx2.HTTPTransport(uds=str(path))
        with httpx2.Client(transport=transport) as client:
            client_oa = openai.OpenAI(
                base_url="http://gateway/v1", api_key=key.token, http_client=client
            )
            reply = client_oa.chat.completions.create(
                model="m", messages=[{"role": "user", "content": PROMPT}]
            )
        assert reply.usage is not None
        assert reply.usage.prompt_tokens == 101
        assert gw.close_trial(key).requests == 1
    assert not path.exists(), "the socket is removed on close"


@pytest.mark.parametrize(
    ("model", "base_url", "env", "error"),
    [
        ("openai:gpt-5.1", None, {}, "set OPENAI_API_KEY"),
        ("anthropic:claude-x", None, {}, "set ANTHROPIC_API_KEY"),
        ("bedrock:claude", None, {}, "--model-base-url"),
        ("gpt-5.1", None, {"OPENAI_API_KEY": "k"}, "--model-base-url"),
        ("openai:qwen3", "127.0.0.1:11434/v1", {}, "must start with http"),
        ("  ", None, {}, "empty"),
    ],
)
def test_an_unreachable_model_is_a_clear_error(
    model: str, base_url: str | None, env: dict[str, str], error: str
) -> None:
    with pytest.raises(GatewayConfigError, match=error):
        Upstream.resolve(model, base_url, env)


def test_providers_resolve_to_their_apis_and_keys() -> None:
    up = Upstream.resolve("anthropic:claude-sonnet-4-5", None, {"ANTHROPIC_API_KEY": "k"})
    assert up.name == "claude-sonnet-4-5"
    assert up.url("messages") == "https://api.anthropic.com/v1/messages"
    assert up.url("responses") is None
    up = Upstream.resolve("openai-responses:gpt-5.1", None, {"OPENAI_API_KEY": "k"})
    assert up.url("responses") == "https://api.openai.com/v1/responses"
    assert up.url("messages") is None
    local = Upstream.resolve("qwen3:32b", "http://127.0.0.1:11434/v1/", {})
    assert local.name == "qwen3:32b"
    assert local.url("chat") == "http://127.0.0.1:11434/v1/chat/completions"


def test_an_api_the_provider_lacks_is_refused_by_name(model_server: ModelServer) -> None:
    upstream = Upstream.resolve(
        "openai:gpt-5.1", None, {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": model_server.url}
    )
    with ModelGateway(upstream) as gw:
        key = gw.open_trial("t/t1", AnalystLimits())
        with pytest.raises(
            anthropic.BadRequestError, match="OpenAI Chat Completions, OpenAI Responses"
        ):
            turn("messages", gw, key, 0, False)
        assert gw.close_trial(key).refused[0]["status"] == 400
    assert model_server.requests == []
