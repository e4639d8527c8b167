"""The model gateway records each trial's exchanges and a replaying gateway serves them back
offline, identically; and the token meter reads a stream however it is cut into chunks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_backintel.analyst_api import AnalystLimits
from pytest_backintel.records.cassettes import CassetteError, read_exchanges, write_exchanges
from pytest_backintel.run.gateway import ModelGateway, TrialKey, Upstream
from pytest_backintel.run.gateway.metering import StreamMeter, Tokens
from pytest_backintel.testing.model_formats import reply_events
from pytest_backintel.testing.model_server import ModelServer, Step

PROMPT = "How many orders were delivered?"
STEPS = [
    Step.call("list_tables", usage=(101, 7)),
    Step.call("run_sql", {"sql": "SELECT count(*) FROM orders"}, usage=(233, 19)),
    Step.prose("42 orders", usage=(377, 31)),
]


def conversation(gw: ModelGateway, key: TrialKey) -> list[Any]:
    """Three requests in three formats, two of them streamed; what the agent received."""
    oa = openai.OpenAI(base_url=gw.openai_base_url, api_key=key.token, max_retries=0)
    an = anthropic.Anthropic(base_url=gw.base_url, api_key=key.token, max_retries=0)
    user: list[Any] = [{"role": "user", "content": PROMPT}]
    got: list[Any] = [oa.chat.completions.create(model="m", messages=user).model_dump()]
    chunks = oa.chat.completions.create(
        model="m", messages=[*user, {"role": "assistant", "content": "…"}], stream=True
    )
    got.append([c.model_dump() for c in chunks])
    turns = [*user, {"role": "assistant", "content": "…"}, {"role": "user", "content": "go"}]
    with an.messages.stream(model="c", max_tokens=64, messages=turns * 1 + turns[1:]) as events:
        got.append([e.model_dump() for e in events])
    return got


def test_a_recorded_trial_replays_offline_with_identical_responses(
    tmp_path: Path, model_server: ModelServer
) -> None:
    model_server.script("orders were delivered", STEPS)
    with ModelGateway(Upstream.resolve("openai:qwen3", model_server.url)) as gw:
        key = gw.open_trial("delivered/t1", AnalystLimits())
        live = conversation(gw, key)
        recorded = gw.close_trial(key)
    write_exchanges(tmp_path, "delivered/t1", recorded.exchanges)
    model_server.stop()  # offline from here: nothing answers at the provider's URL

    exchanges = read_exchanges(tmp_path / "cassettes", "delivered/t1")
    with ModelGateway(None) as gw:
        key = gw.open_trial("delivered/t1", AnalystLimits(), replay=exchanges)
        replayed = conversation(gw, key)
        again = gw.close_trial(key)
    assert json.dumps(replayed, default=str) == json.dumps(live, default=str)
    assert (again.requests, again.input_tokens, again.output_tokens) == (3, 711, 57)
    assert (recorded.input_tokens, recorded.output_tokens) == (711, 57)
    assert again.model is None, "a replay bills no model"
    assert again.cost_usd is None
    assert all(e["request_matches"] for e in again.exchanges)
    assert again.replay_error is None


def test_a_replay_that_diverges_is_refused_and_named(
    tmp_path: Path, model_server: ModelServer
) -> None:
    model_server.script("orders were delivered", STEPS)
    with ModelGateway(Upstream.resolve("openai:qwen3", model_server.url)) as gw:
        key = gw.open_trial("d/t1", AnalystLimits())
        oa = openai.OpenAI(base_url=gw.openai_base_url, api_key=key.token, max_retries=0)
        oa.chat.completions.create(model="m", messages=[{"role": "user", "content": PROMPT}])
        exchanges = gw.close_trial(key).exchanges
    with ModelGateway(None) as gw:
        key = gw.open_trial("d/t1", AnalystLimits(), replay=exchanges)
        an = anthropic.Anthropic(base_url=gw.base_url, api_key=key.token, max_retries=0)
        with pytest.raises(anthropic.APIStatusError, match="Chat Completions when recorded"):
            an.messages.create(model="c", max_tokens=8, messages=[{"role": "user", "content": "x"}])
        usage = gw.close_trial(key)
        assert usage.replay_error is not None
        assert usage.requests == 0
        with pytest.raises(ValueError, match="replay only"):
            gw.open_trial("d/t2", AnalystLimits())
    with pytest.raises(CassetteError, match="not recorded through the model gateway"):
        read_exchanges(tmp_path, "d/t9")


@settings(max_examples=60, deadline=None)
@given(
    api=st.sampled_from(["chat", "responses", "messages"]),
    usage=st.tuples(st.integers(0, 10**7), st.integers(0, 10**6)),
    cuts=st.lists(st.integers(1, 40), max_size=60),
    crlf=st.booleans(),
)
def test_the_stream_meter_reads_any_chunking(
    api: Any, usage: tuple[int, int], cuts: list[int], crlf: bool
) -> None:
    step = Step.call("run_sql", {"sql": "SELECT 1"}, usage=usage)
    stream = b"".join(reply_events(api, "m", step, 0, usage=True))
    if crlf:
        stream = stream.replace(b"\n", b"\r\n")
    meter, at = StreamMeter(api), 0
    for cut in cuts:
        meter.feed(stream[at : at + cut])
        at += cut
    meter.feed(stream[at:])
    meter.close()
    assert meter.tokens == Tokens(*usage)


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_a_stream_without_counts_meters_none(api: Any) -> None:
    meter = StreamMeter(api)
    for event in reply_events(api, "m", Step.prose("hi", usage=None), 0, usage=True):
        meter.feed(event)
    meter.close()
    assert meter.tokens is None
    assert meter.events > 0
