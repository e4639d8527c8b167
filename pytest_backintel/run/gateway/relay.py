"""One model request of a live trial: checked against its budgets, then forwarded upstream
(with retries, streamed or whole, tokens metered as they pass) or served from the trial's
recording, and kept as an exchange for the trial's cassette."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from pytest_backintel.run.gateway.forward import ProviderFailed, RetryPolicy, send_with_retries
from pytest_backintel.run.gateway.ledger import TrialState, limit_reason
from pytest_backintel.run.gateway.metering import StreamMeter, Tokens, body_tokens
from pytest_backintel.run.gateway.upstream import Api, Upstream
from pytest_backintel.run.gateway.wire import (
    Scope,
    Send,
    error_body,
    header,
    reply,
    start_stream,
    stream_chunk,
)

__all__ = ["API_NAMES", "Relay"]

API_NAMES: dict[Api, str] = {
    "chat": "OpenAI Chat Completions",
    "responses": "OpenAI Responses",
    "messages": "Anthropic Messages",
}
_PASSED_HEADERS = ("anthropic-version", "anthropic-beta", "openai-beta")
_NO_RETRY = {"x-should-retry": "false"}
_REJECTED = frozenset({401, 403, 404})
"""Upstream answers that mean the harness's key or model is wrong: the provider's fault."""


@dataclass
class Relay:
    upstream: Upstream | None
    client: httpx.AsyncClient
    policy: RetryPolicy
    lock: threading.Lock
    run_check: Callable[[], str | None]
    price: Callable[[Tokens], float | None]

    async def serve(
        self, trial: TrialState, api: Api, raw: bytes, scope: Scope, send: Send
    ) -> None:
        """Answer one model request of `trial` (authenticated by the caller)."""
        path = str(scope.get("path"))
        try:
            request = json.loads(raw)
        except ValueError:
            request = None
        if not isinstance(request, dict):
            await self.refuse(
                trial,
                send,
                path,
                400,
                "invalid_request_error",
                f"the body of POST {path} is not a JSON object",
            )
            return
        with self.lock:
            why = limit_reason(trial.usage, trial.limits)
            new = why is not None and trial.usage.stopped is None
        why = why or self.run_check()
        if why is not None:
            with self.lock:
                if new or trial.usage.stopped is None:
                    trial.usage.budget_exceeded = why
            await self.refuse(trial, send, path, 403, "budget_exceeded", why)
            return
        record: dict[str, Any] = {"api": api, "stream": bool(request.get("stream"))}
        record["request"] = request
        started = time.monotonic()
        try:
            if trial.replay is not None:
                await self._replay(trial, api, record, send)
            else:
                await self._forward(trial, api, record, scope, send)
        finally:
            record["elapsed_s"] = round(time.monotonic() - started, 6)
            if "status" in record:
                with self.lock:
                    record["seq"] = len(trial.usage.exchanges) + 1
                    trial.usage.exchanges.append(record)

    async def refuse(
        self, trial: TrialState | None, send: Send, path: str, status: int, kind: str, why: str
    ) -> None:
        """Answer `status` with `why`, and keep the refusal in the trial's usage."""
        if trial is not None:
            with self.lock:
                entry = {"at": time.time(), "path": path, "status": status, "reason": why}
                trial.usage.refused.append(entry)
        await reply(send, status, error_body(kind, why), extra=_NO_RETRY)

    def _charge(self, trial: TrialState, tokens: Tokens | None) -> None:
        cost = None if tokens is None or trial.replay is not None else self.price(tokens)
        with self.lock:
            trial.charge(tokens, cost)

    async def _forward(
        self, trial: TrialState, api: Api, record: dict[str, Any], scope: Scope, send: Send
    ) -> None:
        upstream = self.upstream
        url = upstream.url(api) if upstream is not None else None
        if upstream is None or url is None:
            offered = ", ".join(API_NAMES[a] for a in (upstream.urls if upstream else ()))
            why = (
                f"the configured model {upstream.model if upstream else None!r} is not reached "
                f"through the {API_NAMES[api]} API here; it is through: {offered or 'none'}"
            )
            await self.refuse(trial, send, str(scope.get("path")), 400, "unsupported_api", why)
            return
        body = dict(record["request"]) | {"model": upstream.name}
        if record["stream"] and api == "chat":
            body["stream_options"] = dict(body.get("stream_options") or {}) | {
                "include_usage": True
            }
        headers = dict(upstream.headers) | {"content-type": "application/json"}
        for name in _PASSED_HEADERS:
            value = header(scope, name)
            if value:
                headers[name] = value
        if api == "messages":
            headers.setdefault("anthropic-version", "2023-06-01")
        retries: list[dict[str, Any]] = []
        try:
            response = await send_with_retries(
                self.client, url, headers, json.dumps(body).encode(), self.policy, retries
            )
        except ProviderFailed as exc:
            self._provider_failed(trial, record, retries, str(exc))
            await reply(send, 502, error_body("provider_error", str(exc)), extra=_NO_RETRY)
            return
        finally:
            record["attempts"] = len(retries) + 1
            with self.lock:
                trial.usage.provider_retries += retries
        try:
            await self._pass_on(trial, api, record, response, send)
        finally:
            await response.aclose()

    def _provider_failed(
        self, trial: TrialState, record: dict[str, Any], retries: list[dict[str, Any]], why: str
    ) -> None:
        record |= {"status": 502, "error": why, "response": None, "tokens": None}
        with self.lock:
            if trial.usage.provider_error is None:
                trial.usage.provider_error = why

    async def _pass_on(
        self,
        trial: TrialState,
        api: Api,
        record: dict[str, Any],
        response: httpx.Response,
        send: Send,
    ) -> None:
        status = response.status_code
        ctype = response.headers.get("content-type", "application/json")
        record |= {"status": status, "content_type": ctype, "error": None}
        if status in _REJECTED:
            text = (await response.aread()).decode("utf-8", "replace")
            why = (
                f"the model provider rejected the harness's request with HTTP {status} (its key, "
                "or the model name, is wrong: see the run's configuration)"
            )
            self._provider_failed(trial, record, [], why)
            record["provider_body"] = text[:500]
            await reply(send, 502, error_body("provider_error", why), extra=_NO_RETRY)
            return
        if record["stream"] and status == 200 and "text/event-stream" in ctype:
            await self._pass_stream(trial, api, record, response, send, ctype)
            return
        data = await response.aread()
        record["response"] = data.decode("utf-8", "replace")
        tokens = None
        if 200 <= status < 300:
            with contextlib.suppress(ValueError):
                tokens = body_tokens(api, json.loads(data))
            self._charge(trial, tokens)
        record["tokens"] = (
            None if tokens is None else {"input": tokens.input, "output": tokens.output}
        )
        await reply(send, status, data, ctype)

    async def _pass_stream(
        self,
        trial: TrialState,
        api: Api,
        record: dict[str, Any],
        response: httpx.Response,
        send: Send,
        ctype: str,
    ) -> None:
        meter = StreamMeter(api)
        chunks: list[bytes] = []
        listening = True
        await start_stream(send, 200, ctype)
        try:
            async for chunk in response.aiter_bytes():
                meter.feed(chunk)
                chunks.append(chunk)
                if listening:
                    try:
                        await stream_chunk(send, chunk)
                    except OSError:
                        listening = False  # the agent left: read on, the tokens are billed
        except httpx.HTTPError as exc:
            why = f"the model provider's stream broke after {meter.events} events: {exc}"
            record["error"] = why
            with self.lock:
                trial.usage.provider_error = trial.usage.provider_error or why
        finally:  # counted even when the trial's end cancels the rest of the stream
            meter.close()
            record["response"] = b"".join(chunks).decode("utf-8", "replace")
            tokens = meter.tokens
            record["tokens"] = (
                None if tokens is None else {"input": tokens.input, "output": tokens.output}
            )
            self._charge(trial, tokens)
        if listening:
            with contextlib.suppress(OSError):
                await stream_chunk(send, b"", more=False)

    async def _replay(
        self, trial: TrialState, api: Api, record: dict[str, Any], send: Send
    ) -> None:
        recording = trial.replay or []
        with self.lock:
            index = trial.played
            trial.played += 1
        recorded = recording[index] if index < len(recording) else None
        why = None
        if recorded is None:
            why = (
                f"replay: the recording of trial {trial.key.trial_id!r} has {len(recording)} "
                "model requests but the agent made another: the replayed run diverged from "
                "the recorded one"
            )
        elif recorded.get("api") != api:
            why = (
                f"replay: request {index + 1} of trial {trial.key.trial_id!r} was "
                f"{API_NAMES.get(recorded.get('api'), recorded.get('api'))} when recorded, "  # type: ignore[arg-type]
                f"{API_NAMES[api]} now: the replayed run diverged from the recorded one"
            )
        if why is not None or recorded is None:
            with self.lock:
                trial.usage.replay_error = trial.usage.replay_error or why
            await self.refuse(trial, send, "replay", 409, "replay_diverged", str(why))
            return
        status = int(recorded.get("status") or 502)
        ctype = str(recorded.get("content_type") or "application/json")
        text = recorded.get("response")
        data = (text or "").encode()
        counted = recorded.get("tokens")
        tokens = Tokens(int(counted["input"]), int(counted["output"])) if counted else None
        record |= {
            "status": status,
            "content_type": ctype,
            "response": text,
            "tokens": counted,
            "error": recorded.get("error"),
            "replayed": index + 1,
            "request_matches": recorded.get("request") == record["request"],
        }
        if 200 <= status < 300:
            self._charge(trial, tokens)
        if status == 502 and recorded.get("error"):
            with self.lock:
                trial.usage.provider_error = trial.usage.provider_error or recorded["error"]
        if "text/event-stream" in ctype:
            await start_stream(send, status, ctype)
            for event in data.split(b"\n\n"):
                if event:
                    await stream_chunk(send, event + b"\n\n")
            await stream_chunk(send, b"", more=False)
        else:
            extra = _NO_RETRY if status == 502 else None
            await reply(
                send,
                status,
                data or error_body("provider_error", str(recorded.get("error"))),
                ctype,
                extra,
            )
