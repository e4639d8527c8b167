"""One trial's MCP server on loopback: Streamable HTTP on a Unix socket (mounted into the
agent's sandbox) and a loopback TCP port, under the trial's own path and bearer token.

Every server is a task on one event loop in a background thread. A request without the
trial's token, or on another path, is refused (401/404) and recorded in `refused`; nothing
behind it runs. `close` stops the server: the token dies with the trial.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import secrets
import socket
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import uvicorn

from analyst.mcp_tools import TrialTools

__all__ = ["TrialServer", "server_loop"]

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def server_loop() -> asyncio.AbstractEventLoop:
    """The event loop every trial's MCP server runs on (started on first use)."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="backintel-mcp", daemon=True).start()
        return _loop


class _Guard:
    """Lets through only requests on the trial's path with its bearer token."""

    def __init__(self, app: Any, path: str, token: str, refused: list[dict[str, Any]]) -> None:
        self.app, self.path, self.token, self.refused = app, path, token, refused
        self.started = time.perf_counter()
        self.closed = False

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        given = headers.get("authorization", "")
        reason = None
        if self.closed:
            reason, status = "the trial is over", 410
        elif scope["path"] != self.path:
            reason, status = "not this trial's path", 404
        elif not given:
            reason, status = "no bearer token", 401
        elif not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
            reason, status = "not this trial's token", 401
        if reason is None:
            await self.app(scope, receive, send)
            return
        self.refused.append(
            {
                "method": scope.get("method"),
                "path": str(scope["path"])[:200],
                "reason": reason,
                "at_s": round(time.perf_counter() - self.started, 4),
            }
        )
        body = json.dumps({"error": f"refused: {reason}"}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})


class TrialServer:
    """The MCP server of one trial (`start`, then `url`, `token`, `socket_path`; `close`)."""

    def __init__(
        self,
        tools: TrialTools,
        trial_id: str,
        socket_dir: Path | None,
        *,
        tcp: bool = True,
        port: int = 0,
    ) -> None:
        self.tools = tools
        self.trial_id = trial_id
        self.token = secrets.token_urlsafe(32)
        self.path = f"/trials/{trial_id}/mcp"
        self.socket_path = socket_dir / "mcp.sock" if socket_dir is not None else None
        self.refused: list[dict[str, Any]] = []
        self._tcp = tcp
        self._want_port = port
        self.port: int | None = None
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Future[Any] | None = None
        self._guard: _Guard | None = None

    @property
    def url(self) -> str:
        """The loopback TCP URL (on the host; inside a sandbox the forwarder's port)."""
        return f"http://127.0.0.1:{self.port}{self.path}"

    def _sockets(self) -> list[socket.socket]:
        made: list[socket.socket] = []
        if self.socket_path is not None:
            unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            unix.bind(str(self.socket_path))
            self.socket_path.chmod(0o777)  # the sandbox's uid connects to it
            made.append(unix)
        if self._tcp:
            tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.bind(("127.0.0.1", self._want_port))
            self.port = tcp.getsockname()[1]
            made.append(tcp)
        for sock in made:
            sock.listen(64)
            sock.setblocking(False)
        return made

    def start(self) -> TrialServer:
        logging.getLogger("mcp").setLevel(logging.WARNING)  # no line per session to the console
        app = self.tools.server.streamable_http_app(
            streamable_http_path=self.path, stateless_http=True, json_response=True
        )
        guarded = self._guard = _Guard(app, self.path, self.token, self.refused)
        config = uvicorn.Config(
            guarded, log_level="error", lifespan="on", access_log=False, timeout_graceful_shutdown=1
        )
        server = uvicorn.Server(config)
        self._server = server
        sockets = self._sockets()
        loop = server_loop()
        # The sockets listen already: a client that connects before uvicorn has started waits
        # in the backlog, so the agent's start need not wait for the server's.
        self._task = asyncio.run_coroutine_threadsafe(server.serve(sockets=sockets), loop)  # type: ignore[assignment]
        return self

    def close(self) -> None:
        """Refuse every request from now on (the token dies), stop serving without waiting for
        uvicorn's shutdown tick, and close the tools' store session."""
        self.tools.close()
        if self._server is not None:
            self._server.should_exit = True
            self._server.force_exit = True
        if self._guard is not None:
            self._guard.closed = True  # refused from now on, while uvicorn winds down
        if self.socket_path is not None:
            self.socket_path.unlink(missing_ok=True)
