"""Token counts read from what the provider sent, whole or streamed, in each API's format.

Chat Completions reports `usage.prompt_tokens`/`completion_tokens` (in a stream: the closing
chunk the gateway asks for with `stream_options.include_usage`); Responses reports
`usage.input_tokens`/`output_tokens` (in a stream: in `response.completed`); Anthropic
Messages reports input (plus cache writes and reads) and output tokens, in a stream split
between `message_start` and the cumulative `message_delta`. A response without counts gives
None: its tokens are unknown, never 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pytest_backintel.run.gateway.upstream import Api

__all__ = ["StreamMeter", "Tokens", "body_tokens"]


@dataclass(frozen=True)
class Tokens:
    input: int
    output: int


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _usage_tokens(api: Api, usage: Any) -> Tokens | None:
    if not isinstance(usage, dict):
        return None
    if api == "chat":
        inp, out = _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))
    else:
        inp, out = _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))
    if inp is None or out is None:
        return None
    if api == "messages":
        for extra in ("cache_creation_input_tokens", "cache_read_input_tokens"):
            inp += _int(usage.get(extra)) or 0
    return Tokens(inp, out)


def body_tokens(api: Api, body: Any) -> Tokens | None:
    """The token counts of a whole JSON response (None: it reported none)."""
    return _usage_tokens(api, body.get("usage")) if isinstance(body, dict) else None


class StreamMeter:
    """Reads a server-sent-event stream as it passes through and keeps its token counts."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self._buffer = b""
        self._input: int | None = None
        self._output: int | None = None
        self.events = 0

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the stream (any split, events may straddle chunks)."""
        self._buffer += chunk.replace(b"\r\n", b"\n")
        while b"\n\n" in self._buffer:
            event, self._buffer = self._buffer.split(b"\n\n", 1)
            self._event(event)

    def close(self) -> None:
        """The stream ended: read a last event not followed by a blank line."""
        if self._buffer.strip():
            self._event(self._buffer)
        self._buffer = b""

    def _event(self, raw: bytes) -> None:
        lines = raw.decode("utf-8", "replace").split("\n")
        data = "\n".join(line[5:].lstrip(" ") for line in lines if line.startswith("data:"))
        if not data or data == "[DONE]":
            return
        try:
            obj = json.loads(data)
        except ValueError:
            return
        if isinstance(obj, dict):
            self.events += 1
            self._read(obj)

    def _read(self, obj: dict[str, Any]) -> None:
        kind = obj.get("type")
        if self.api == "chat":
            self._take(_usage_tokens("chat", obj.get("usage")))
        elif self.api == "responses":
            response = obj.get("response")
            if kind in ("response.completed", "response.incomplete", "response.failed"):
                usage = response.get("usage") if isinstance(response, dict) else None
                self._take(_usage_tokens("responses", usage))
        elif kind == "message_start":
            message = obj.get("message")
            usage = message.get("usage") if isinstance(message, dict) else None
            self._anthropic(usage)
        elif kind == "message_delta":
            self._anthropic(obj.get("usage"))

    def _take(self, tokens: Tokens | None) -> None:
        if tokens is not None:
            self._input, self._output = tokens.input, tokens.output

    def _anthropic(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        parts = [
            _int(usage.get(k))
            for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        ]
        if any(p is not None for p in parts):
            self._input = sum(p or 0 for p in parts)
        out = _int(usage.get("output_tokens"))
        if out is not None:
            self._output = out

    @property
    def tokens(self) -> Tokens | None:
        """The stream's counts so far (None until both input and output are known)."""
        if self._input is None or self._output is None:
            return None
        return Tokens(self._input, self._output)
