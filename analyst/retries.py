"""Bounded retries of model requests, each failed attempt recorded.

`RetryingModel` wraps the model under test: the provider SDK's own retries are turned off
(`max_retries=0`) so every attempt is seen here. A rate limit, an unavailable or failing
server, or a broken connection is retried up to `RetryPolicy.attempts` times, waiting the
provider's `Retry-After` (capped) or an exponential backoff; a rejected request (bad key,
unknown model, bad arguments) is not retried. Every failed attempt is appended to the list in
`RETRY_LOG` (one per run, set by `analyst.agent`), so the trial record shows it.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelHTTPError,
    ModelRateLimitError,
    ModelServerError,
    ModelUnavailableError,
)
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

__all__ = ["RETRY_LOG", "RetryPolicy", "RetryingModel", "retryable"]

RETRY_LOG: ContextVar[list[dict[str, Any]] | None] = ContextVar("backintel_retry_log", default=None)
"""The current run's list of failed attempts (None outside a run: nothing is recorded)."""

_RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4
    """Attempts per request in all (the first one included)."""
    base_delay_s: float = 0.5
    """Backoff without Retry-After: base, 2×base, 4×base, …"""
    max_delay_s: float = 30.0
    """Cap on any one wait, Retry-After included."""


def retryable(exc: ModelAPIError) -> bool:
    """Whether waiting and trying again may help (rate limit, server trouble, transport)."""
    transient = (ModelRateLimitError, ModelUnavailableError, ModelServerError, ModelConnectionError)
    if isinstance(exc, transient):
        return True
    return isinstance(exc, ModelHTTPError) and exc.status_code in _RETRY_STATUS


def _entry(attempt: int, exc: ModelAPIError, wait_s: float | None) -> dict[str, Any]:
    return {
        "attempt": attempt,
        "error": f"{type(exc).__name__}: {exc}"[:500],
        "status": exc.status_code if isinstance(exc, ModelHTTPError) else None,
        "retry_after_s": exc.retry_after,
        "wait_s": wait_s,
    }


class RetryingModel(WrapperModel):
    """The wrapped model, with bounded, recorded retries of each request."""

    def __init__(self, wrapped: Model, policy: RetryPolicy | None = None) -> None:
        super().__init__(wrapped)
        self.policy = policy or RetryPolicy()

    def _wait(self, attempt: int, exc: ModelAPIError) -> float:
        policy = self.policy
        asked = exc.retry_after
        wait = asked if asked is not None else policy.base_delay_s * 2 ** (attempt - 1)
        return max(0.0, min(policy.max_delay_s, wait))

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        settings: ModelSettings = {**(model_settings or {}), "max_retries": 0}
        log = RETRY_LOG.get()
        for attempt in range(1, self.policy.attempts + 1):
            try:
                return await super().request(messages, settings, model_request_parameters)
            except ModelAPIError as exc:
                last = attempt == self.policy.attempts or not retryable(exc)
                wait = None if last else self._wait(attempt, exc)
                if log is not None:
                    log.append(_entry(attempt, exc, wait))
                if wait is None:
                    raise
                await asyncio.sleep(wait)
        raise AssertionError("unreachable: the last attempt returns or raises")
