"""The model gateway: one loopback HTTP server per run that an external agent calls as its
model provider, with its trial's token as the API key.

    gateway = ModelGateway(Upstream.resolve(model, base_url), budget=run_budget).start()
    key = gateway.open_trial("scn-1/t1", limits)        # per trial
    env = gateway.agent_env(key)                        # OPENAI_BASE_URL, ANTHROPIC_API_KEY...
    ... run the agent ...
    usage = gateway.close_trial(key)                    # requests, tokens, cost, exchanges
    gateway.close()

It speaks `POST /v1/chat/completions`, `/v1/responses` (OpenAI) and `/v1/messages`
(Anthropic), whole or streamed, plus `GET /v1/models`. A request without a live trial's token
(none, unknown, or a closed trial's) is refused with 401 and kept in `refusals`. Served by
uvicorn on its own event loop in a thread, on 127.0.0.1 and, when given a path, on a Unix
socket too (for an agent in a sandbox with no network, through a bind-mounted socket). A
trial opened with `replay=` (its recorded exchanges) is answered from them: no provider is
called.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from pytest_backintel.analyst_api import AnalystLimits
from pytest_backintel.records.prices import load_prices
from pytest_backintel.run.budget import RunBudget
from pytest_backintel.run.gateway.forward import RetryPolicy
from pytest_backintel.run.gateway.ledger import (
    GatewayUsage,
    TrialKey,
    TrialState,
    run_reason,
)
from pytest_backintel.run.gateway.metering import Tokens
from pytest_backintel.run.gateway.relay import Relay
from pytest_backintel.run.gateway.upstream import Upstream, api_of
from pytest_backintel.run.gateway.wire import (
    Receive,
    Scope,
    Send,
    error_body,
    read_body,
    reply,
    request_token,
)

__all__ = ["TOKEN_PREFIX", "ModelGateway"]

TOKEN_PREFIX = "bigw-"
CLOSE_GRACE_S = 0.5
"""How long `close_trial` lets the trial's requests in flight finish before cancelling them."""
_NO_RETRY = {"x-should-retry": "false"}


class ModelGateway:
    """A per-run model gateway; `start()` it, open and close trials, `close()` it."""

    def __init__(
        self,
        upstream: Upstream | None,
        *,
        budget: RunBudget | None = None,
        socket_path: Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        retry: RetryPolicy | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        """`upstream` None: a replay-only gateway (every trial must be opened with `replay`)."""
        self.upstream = upstream
        self.budget = budget
        self.socket_path = socket_path
        self.retry = retry or RetryPolicy()
        self.timeout_s = timeout_s
        self._host, self._port = host, port
        self._lock = threading.Lock()
        self._trials: dict[str, TrialState] = {}
        self._closed: dict[str, str] = {}
        self._refusals: list[dict[str, Any]] = []
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: uvicorn.Server | None = None
        self._sockets: list[socket.socket] = []
        self._relay: Relay | None = None
        self._failure: BaseException | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT`: the Anthropic base URL; the OpenAI one adds `/v1`."""
        if not self._sockets:
            raise RuntimeError("the model gateway is not started: call start() first")
        host, port = self._sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    def agent_env(self, key: TrialKey, base_url: str | None = None) -> dict[str, str]:
        """The environment an agent needs to call its models through the gateway (both SDK
        families), `base_url` replacing the loopback one (e.g. a proxy inside a sandbox)."""
        root = (base_url or self.base_url).rstrip("/")
        return {
            "OPENAI_BASE_URL": f"{root}/v1",
            "OPENAI_API_KEY": key.token,
            "ANTHROPIC_BASE_URL": root,
            "ANTHROPIC_API_KEY": key.token,
        }

    def start(self) -> ModelGateway:
        """Bind, serve in a background thread, return once requests are accepted."""
        tcp = socket.create_server((self._host, self._port))
        # Accepted sockets inherit TCP_NODELAY; asyncio sets it only on sockets whose proto is
        # IPPROTO_TCP, which create_server's are not: without it each response's body waits
        # for the agent's delayed ACK of its head (some 40 ms a request).
        tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sockets = [tcp]
        if self.socket_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
            uds = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            uds.bind(str(self.socket_path))
            uds.listen(128)
            os.chmod(self.socket_path, 0o660)
            self._sockets.append(uds)
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="backintel-model-gateway", daemon=True
        )
        self._thread.start()
        if not ready.wait(30) or self._failure is not None:
            self.close()
            raise RuntimeError(f"the model gateway did not start: {self._failure!r}")
        return self

    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve(ready))
        except BaseException as exc:  # reported by start()
            self._failure = exc
            ready.set()
        finally:
            loop.close()

    async def _serve(self, ready: threading.Event) -> None:
        timeout = httpx.Timeout(self.timeout_s, connect=10.0)
        # TCP_NODELAY: a request goes out as head and body; with Nagle's algorithm the body
        # would wait for the provider's delayed ACK, some 40 ms a request.
        nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
        transport = httpx.AsyncHTTPTransport(socket_options=nodelay)
        async with httpx.AsyncClient(
            timeout=timeout, trust_env=False, transport=transport
        ) as client:
            self._relay = Relay(
                self.upstream, client, self.retry, self._lock, self._run_check, self._price
            )
            config = uvicorn.Config(
                self._app,
                log_level="warning",
                access_log=False,
                lifespan="off",
                interface="asgi3",
                proxy_headers=False,
                ws="none",
                timeout_graceful_shutdown=2,
            )
            self._server = uvicorn.Server(config)
            serving = asyncio.create_task(self._server.serve(sockets=self._sockets))
            while not self._server.started and not serving.done():
                await asyncio.sleep(0.005)
            ready.set()
            await serving

    def close(self) -> None:
        """Refuse every trial still open, stop serving, release the sockets."""
        with self._lock:
            keys = [t.key for t in self._trials.values() if t.open]
        for key in keys:
            self.close_trial(key)
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
            self._thread = None
        for sock in self._sockets:
            sock.close()
        if self.socket_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()

    def __enter__(self) -> ModelGateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- trials ----------------------------------------------------------------------------

    def open_trial(
        self,
        trial_id: str,
        limits: AnalystLimits,
        replay: Sequence[dict[str, Any]] | None = None,
    ) -> TrialKey:
        """A fresh token for one trial, live until `close_trial`; with `replay` (the trial's
        recorded exchanges) its requests are answered from the recording."""
        if replay is None and self.upstream is None:
            raise ValueError(
                f"trial {trial_id!r}: this gateway has no model to forward to (replay only): "
                "open the trial with its recorded exchanges"
            )
        key = TrialKey(trial_id, TOKEN_PREFIX + secrets.token_urlsafe(24))
        model = None if replay is not None or self.upstream is None else self.upstream.model
        usage = GatewayUsage(trial_id, model, cost_usd=None if model is None else 0.0)
        state = TrialState(key, limits, usage, list(replay) if replay is not None else None)
        with self._lock:
            self._trials[key.token] = state
        return key

    def usage(self, key: TrialKey) -> GatewayUsage:
        """What an open trial has used so far."""
        with self._lock:
            return self._trials[key.token].snapshot()

    def close_trial(self, key: TrialKey | str) -> GatewayUsage:
        """End a trial: its token is refused from now on, requests still in flight are
        cancelled (and recorded as such), and what it used is returned."""
        token = key.token if isinstance(key, TrialKey) else key
        with self._lock:
            state = self._trials[token]
            state.open = False
            self._closed[token] = state.key.trial_id
            tasks = list(state.tasks)
        loop = self._loop
        # a request whose answer is all but delivered (its last bytes counted, its exchange
        # kept) is let finish; one still waiting after the grace is cancelled
        live = tasks and loop is not None and not loop.is_closed()
        if live and loop is not None and not self._drained(state, CLOSE_GRACE_S):
            for task in tasks:
                loop.call_soon_threadsafe(task.cancel)
            self._drained(state, 5.0)
        with self._lock:
            del self._trials[token]
            return state.snapshot()

    def _drained(self, state: TrialState, seconds: float) -> bool:
        """Wait up to `seconds` for the trial's requests in flight to end; whether they did."""
        deadline = time.monotonic() + seconds
        while True:
            with self._lock:
                if not state.tasks:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)

    @property
    def refusals(self) -> list[dict[str, Any]]:
        """Requests refused for want of a live trial's token: `{at, path, reason, trial_id}`
        (`trial_id` is the closed trial whose token was used, else None)."""
        with self._lock:
            return [dict(r) for r in self._refusals]

    def _live(self) -> list[GatewayUsage]:
        return [t.usage for t in self._trials.values() if t.open]

    def _run_check(self) -> str | None:
        if self.budget is None or not self.budget.limits.active:
            return None
        spent = self.budget.totals()
        with self._lock:
            return run_reason(self.budget.limits, spent, self._live())

    def _price(self, tokens: Tokens) -> float | None:
        model = self.upstream.model if self.upstream is not None else None
        return load_prices().cost_usd(model, tokens.input, tokens.output)

    # -- the ASGI application -------------------------------------------------------------

    async def _app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path, method = str(scope.get("path")), str(scope.get("method"))
        token = request_token(scope)
        with self._lock:
            state = self._trials.get(token or "")
            live = state is not None and state.open
            why = None if live else self._unauthorised(token, path)
        if why is not None or state is None:
            await reply(send, 401, error_body("authentication_error", str(why)), extra=_NO_RETRY)
            return
        relay = self._relay
        assert relay is not None
        api = api_of(path)
        if method == "GET" and path.rstrip("/") == "/v1/models":
            await self._models(send)
            return
        if method != "POST" or api is None:
            await relay.refuse(
                state,
                send,
                path,
                404,
                "not_found",
                f"no route {method} {path}: the gateway serves POST /v1/chat/completions, "
                "/v1/responses, /v1/messages and GET /v1/models",
            )
            return
        raw = await read_body(receive)
        if raw is None:
            await relay.refuse(
                state, send, path, 413, "request_too_large", "the body is over 32 MiB"
            )
            return
        task = asyncio.current_task()
        assert task is not None
        with self._lock:
            state.tasks.add(task)
        try:
            await relay.serve(state, api, raw, scope, send)
        except asyncio.CancelledError:
            task.uncancel()
            with self._lock:
                state.usage.refused.append(
                    {
                        "at": time.time(),
                        "path": path,
                        "status": 499,
                        "reason": "the trial ended while this request was in flight",
                    }
                )
            with contextlib.suppress(Exception):
                await reply(send, 401, error_body("authentication_error", "the trial has ended"))
        finally:
            with self._lock:
                state.tasks.discard(task)

    def _unauthorised(self, token: str | None, path: str) -> str:
        """Why a request is refused (under the lock), kept in `refusals`."""
        trial_id = self._closed.get(token or "")
        if token is None:
            why = "no API key: give the trial's gateway token as the API key"
        elif trial_id is not None:
            why = f"this token's trial ({trial_id}) has ended: its token is no longer accepted"
        else:
            why = "unknown API key: not the token of a live trial of this run"
        self._refusals.append(
            {"at": time.time(), "path": path, "reason": why, "trial_id": trial_id}
        )
        return why

    async def _models(self, send: Send) -> None:
        name = self.upstream.name if self.upstream is not None else "replay"
        listing = {
            "object": "list",
            "data": [{"id": name, "object": "model", "owned_by": "backintel"}],
        }
        await reply(send, 200, json.dumps(listing).encode())
