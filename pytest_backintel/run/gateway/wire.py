"""The ASGI side of the gateway: reading a request, answering with JSON, bytes or events.

Errors the gateway itself answers carry one body both SDK families read (`{"type": "error",
"error": {"type", "message", "code"}}`) and `x-should-retry: false`, which the OpenAI and
Anthropic clients obey, so a refusal is not retried into a second refusal.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = [
    "MAX_BODY_BYTES",
    "Receive",
    "Scope",
    "Send",
    "error_body",
    "read_body",
    "reply",
    "request_token",
    "start_stream",
    "stream_chunk",
]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

MAX_BODY_BYTES = 32 * 1024 * 1024
"""A request body larger than this is refused (413) without being read further."""


def error_body(kind: str, message: str) -> bytes:
    return json.dumps(
        {"type": "error", "error": {"type": kind, "code": kind, "message": message}}
    ).encode()


def header(scope: Scope, name: str) -> str | None:
    raw = name.encode()
    for key, value in scope.get("headers") or ():
        if key.lower() == raw:
            return bytes(value).decode("latin-1")
    return None


def request_token(scope: Scope) -> str | None:
    """The API key the client sent: `Authorization: Bearer …` (OpenAI) or `x-api-key`
    (Anthropic)."""
    auth = header(scope, "authorization")
    if auth and auth.lower().startswith("bearer "):
        token = auth[7:].strip()
        if token:
            return token
    key = header(scope, "x-api-key")
    return key.strip() or None if key else None


async def read_body(receive: Receive) -> bytes | None:
    """The whole request body, or None when it is larger than `MAX_BODY_BYTES`."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        parts.append(chunk)
        if not message.get("more_body"):
            break
    return b"".join(parts)


def _headers(content_type: str, extra: dict[str, str]) -> list[tuple[bytes, bytes]]:
    items = {"content-type": content_type, **extra}
    return [(k.encode(), v.encode("latin-1")) for k, v in items.items()]


async def reply(
    send: Send,
    status: int,
    body: bytes,
    content_type: str = "application/json",
    extra: dict[str, str] | None = None,
) -> None:
    """One whole response."""
    headers = _headers(content_type, {"content-length": str(len(body)), **(extra or {})})
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def start_stream(send: Send, status: int, content_type: str) -> None:
    """The head of a streamed response; `stream_chunk` sends its body."""
    headers = _headers(content_type, {"cache-control": "no-cache"})
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def stream_chunk(send: Send, chunk: bytes, more: bool = True) -> None:
    await send({"type": "http.response.body", "body": chunk, "more_body": more})
