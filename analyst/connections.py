"""A cap on the model requests in flight at once (`--max-connections N`).

`--concurrency` counts trials; this counts requests to the analyst's provider. A trial spends
part of its time between requests (running its tools, its evidence, its store), so with more
trials in flight than connections a request is always waiting when one ends, and the provider
never sees more than N at once: what a rate limit or a local server's parallel slots ask for.
Every agent run of the process is a task on one event loop (`analyst.loop`), so one semaphore
serves all of them; a request waiting for a connection is not sent, and not yet an attempt.
Models given the same `group` (a model matrix's models at one provider) share one semaphore.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

__all__ = ["ConnectionLimitedModel"]

_GROUPS: dict[tuple[str, int], dict[asyncio.AbstractEventLoop, asyncio.Semaphore]] = {}
"""The semaphores (per event loop) each connection group of this process shares."""


class ConnectionLimitedModel(WrapperModel):
    """The wrapped model, with at most `limit` requests in flight at once."""

    def __init__(self, wrapped: Model, limit: int, group: str | None = None) -> None:
        if limit < 1:
            raise ValueError(f"a connection limit must be at least 1, got {limit}")
        super().__init__(wrapped)
        self.limit = limit
        self._slots: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            {} if group is None else _GROUPS.setdefault((group, limit), {})
        )
        self.in_flight = 0
        self.most_in_flight = 0

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        for other in [o for o in self._slots if o.is_closed()]:
            del self._slots[other]
        return self._slots.setdefault(loop, asyncio.Semaphore(self.limit))

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[None]:
        async with self._semaphore():
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            try:
                yield
            finally:
                self.in_flight -= 1

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        async with self._connection():
            return await super().request(messages, model_settings, model_request_parameters)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: Any = None,
    ) -> AsyncIterator[StreamedResponse]:
        async with (
            self._connection(),
            super().request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as stream,
        ):
            yield stream
