"""`--max-connections`: the model analyst's requests in flight at once, across its trials."""

from __future__ import annotations

import asyncio

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel

from analyst.connections import ConnectionLimitedModel
from pytest_backintel.run.pipeline import AUTO_CONCURRENCY, trials_in_flight


def _counting_model() -> tuple[FunctionModel, list[int]]:
    """A model that takes 20 ms per request and counts the requests it is serving at once."""
    now_most = [0, 0]

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        now_most[0] += 1
        now_most[1] = max(now_most)
        await asyncio.sleep(0.02)
        now_most[0] -= 1
        return ModelResponse(parts=[TextPart("ok")])

    return FunctionModel(respond), now_most


async def _requests(model: ConnectionLimitedModel | FunctionModel, n: int) -> list[str]:
    prompt: list[ModelMessage] = [ModelRequest.user_text_prompt("how many?")]
    answers = await asyncio.gather(
        *(model.request(prompt, None, ModelRequestParameters()) for _ in range(n))
    )
    return [str(a.parts[0].content) for a in answers]  # type: ignore[union-attr]


@pytest.mark.parametrize("limit", [1, 3, 12])
def test_no_more_requests_than_the_limit_reach_the_model(limit: int) -> None:
    inner, now_most = _counting_model()
    limited = ConnectionLimitedModel(inner, limit)
    assert asyncio.run(_requests(limited, 12)) == ["ok"] * 12
    assert now_most[1] == limited.most_in_flight == limit
    assert limited.in_flight == 0


def test_without_the_limit_every_request_is_in_flight_at_once() -> None:
    inner, now_most = _counting_model()
    assert asyncio.run(_requests(inner, 12)) == ["ok"] * 12
    assert now_most[1] == 12  # so the limit above is what held them back


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1, got 0"):
        ConnectionLimitedModel(_counting_model()[0], 0)


def test_auto_concurrency_keeps_more_trials_than_connections_in_flight() -> None:
    assert trials_in_flight(None, "model", 16) == 32
    assert trials_in_flight(None, "model", 1) == AUTO_CONCURRENCY
    assert trials_in_flight(None, "model") == AUTO_CONCURRENCY
    assert trials_in_flight(None, "custom", 16) == 1
    assert trials_in_flight(None, "calibration", cores=2) == 2
    assert trials_in_flight(None, "calibration", cores=1) == 1  # and in an xdist worker
    assert trials_in_flight(None, "replay", cores=2) == 1
    assert trials_in_flight(5, "model", 16) == 5
