"""Sending one request upstream with bounded, recorded retries, as the built-in analyst does.

A rate limit (429), a server in trouble (408, 409, 425, 5xx, 529) or a broken, refused or
timed-out connection is retried up to `RetryPolicy.attempts` times in all, waiting the
provider's `retry-after-ms` / `Retry-After` (capped) or an exponential backoff; any other
answer is returned as it is. Every failed attempt is appended to the trial's retry log in
the built-in analyst's form (`attempt, error, status, retry_after_s, wait_s`). When the last
attempt fails, `ProviderFailed` says why: the trial is then blocked (`provider_error`), not
wrong.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["RETRY_STATUS", "ProviderFailed", "RetryPolicy", "send_with_retries"]

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4
    """Attempts per request in all (the first one included)."""
    base_delay_s: float = 0.5
    """Backoff without Retry-After: base, 2×base, 4×base, …"""
    max_delay_s: float = 30.0
    """Cap on any one wait, Retry-After included."""


class ProviderFailed(Exception):
    """Every attempt failed; the message names the last failure and the attempts made."""

    def __init__(self, message: str, status: int | None) -> None:
        super().__init__(message)
        self.status = status


def _retry_after(headers: httpx.Headers) -> float | None:
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) / scale)
        except ValueError:
            continue  # an HTTP date: fall back to the backoff
    return None


async def send_with_retries(
    client: httpx.AsyncClient,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    policy: RetryPolicy,
    log: list[dict[str, Any]],
) -> httpx.Response:
    """The first answer that is not worth retrying, opened as a stream (the caller reads and
    closes it); `ProviderFailed` after the last failed attempt."""
    for attempt in range(1, policy.attempts + 1):
        status: int | None = None
        asked: float | None = None
        try:
            request = client.build_request("POST", url, headers=dict(headers), content=body)
            response = await client.send(request, stream=True)
        except httpx.TransportError as exc:
            error = f"{type(exc).__name__}: {exc or 'connection failed'}"
        else:
            if response.status_code not in RETRY_STATUS:
                return response
            status = response.status_code
            asked = _retry_after(response.headers)
            try:
                text = (await response.aread()).decode("utf-8", "replace")
            except httpx.HTTPError:
                text = ""
            finally:
                await response.aclose()
            error = f"HTTP {status}: {text.strip()}"
        last = attempt == policy.attempts
        backoff = policy.base_delay_s * 2 ** (attempt - 1)
        wait = (
            None if last else max(0.0, min(policy.max_delay_s, backoff if asked is None else asked))
        )
        log.append(
            {
                "attempt": attempt,
                "error": error[:500],
                "status": status,
                "retry_after_s": asked,
                "wait_s": wait,
            }
        )
        if wait is None:
            raise ProviderFailed(
                f"the model provider failed {attempt} attempt(s) in a row; last: {error[:300]}",
                status,
            )
        await asyncio.sleep(wait)
    raise AssertionError("unreachable: the last attempt returns or raises")
