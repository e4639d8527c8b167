"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests, scripted: Chat Completions,
and also the OpenAI Responses and Anthropic Messages APIs, each whole or streamed (SSE).

Tests point `--model openai:<name> --model-base-url <server.url>` at it, so the real `openai`
client behind Pydantic AI's OpenAI provider speaks the real wire protocol to it. Each `Script`
answers the conversations whose user prompt contains its `match`; the step served is the
number of assistant messages already in the request (so the server keeps no per-conversation
state, and xdist workers can share one server). A step can misbehave: latency, no `usage`,
prose instead of a tool call, an unknown tool, malformed arguments; and each attempt at a step
can first fail (HTTP 500, 429 with Retry-After, a dropped connection, a request that never
answers). `unused_url()` gives a base URL where nothing listens (a refused connection).

    with ModelServer() as server:
        server.script("delivered orders", [Step.call("list_tables"), Step.answer(...)])
        ... --model openai:qwen3 --model-base-url {server.url}
        assert server.requests[0].model == "qwen3"

From the command line, `python -m pytest_backintel.testing.model_server --scripts F.json
[--port N]` prints its base URL and serves until interrupted. The JSON maps a question
substring to turns: `{"call": tool, "args": {...}}`, `{"answer": {metrics, evidence, method}}`,
`{"answer_from_result": {metrics: [{name, unit}], evidence, tool?}}` (the values read from the
last tool result), `{"refusal": {missing, explanation}}` or `{"prose": text}`, each with
optional `usage` (`[prompt, completion]`, or null) and `delay_s`.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pytest_backintel.testing.model_formats import (
    Api,
    api_of,
    conversation,
    last_tool_output,
    reply_body,
    reply_events,
)
from pytest_backintel.testing.model_script import (
    ANSWER_TOOL,
    REFUSAL_TOOL,
    Failure,
    Received,
    Script,
    Step,
    model_and_match,
    parse_steps,
)

__all__ = [
    "ANSWER_TOOL",
    "REFUSAL_TOOL",
    "Failure",
    "ModelServer",
    "Received",
    "Script",
    "Step",
    "main",
    "parse_steps",
    "unused_url",
]


@dataclass
class _State:
    scripts: list[Script] = field(default_factory=list)
    attempts: dict[tuple[str, str | None, int], int] = field(default_factory=dict)
    requests: list[Received] = field(default_factory=list)
    down: list[Failure] = field(default_factory=list)
    """Failures served to the next requests, whatever their script (an outage)."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    """Headers and body go out as two writes: with Nagle's algorithm on, the body would wait
    for the client's delayed ACK, some 40 ms per request that no real provider adds."""
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _send(self, status: int, body: Mapping[str, Any], headers: Mapping[str, str] = {}) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            names = sorted({s.match for s in self.server.state.scripts})
            self._send(200, {"object": "list", "data": [{"id": n} for n in names]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        api = api_of(self.path)
        if api is None:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        self._complete(api, request)

    def _complete(self, api: Api, request: dict[str, Any]) -> None:
        state = self.server.state
        prompt, index, tools = conversation(api, request)
        raw_input = request.get("input")
        messages = request.get("messages") or (
            [{"role": "user", "content": raw_input}] if isinstance(raw_input, str) else raw_input
        )
        with state.lock:
            model = request.get("model")
            script = next((s for s in state.scripts if s.serves(prompt, model)), None)
            key = (script.match if script else "", script.model if script else None, index)
            attempt = state.attempts.get(key, 0)
            state.attempts[key] = attempt + 1
            seen = Received(
                self.path,
                request.get("model"),
                script.match if script else None,
                index,
                attempt,
                tools,
                "",
                messages=list(messages or []),
                received_at=time.time(),
            )
            state.requests.append(seen)
            outage = state.down.pop(0) if state.down else None
        if outage is not None:
            self._fail(outage, seen)
            return
        if script is None or index >= len(script.steps):
            seen.reply = "no script" if script is None else "exhausted"
            error = {"message": f"test server: {seen.reply} for this conversation (step {index})"}
            self._send(400, {"error": error | {"type": "invalid_request_error"}})
            return
        step = script.steps[index].filled(last_tool_output(api, request))
        if attempt < len(step.failures):
            self._fail(step.failures[attempt], seen)
            return
        if step.delay_s and state.stopping.wait(step.delay_s):
            return
        seen.reply, seen.usage = "ok", step.usage
        model = str(request.get("model"))
        if request.get("stream"):
            wants_usage = bool((request.get("stream_options") or {}).get("include_usage"))
            self._stream(reply_events(api, model, step, index, wants_usage))
        else:
            self._send(200, reply_body(api, model, step, index))
        seen.answered_at = time.time()

    def _stream(self, events: list[bytes]) -> None:
        """Server-sent events, then the connection closes (the end of the body)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        for event in events:
            self.wfile.write(event)
            self.wfile.flush()
        self.close_connection = True

    def _fail(self, failure: Failure, seen: Received) -> None:
        if failure.kind == "hang":
            seen.reply = "hang"
            self.server.state.stopping.wait()
            self.close_connection = True
            return
        if failure.kind == "drop":
            seen.reply = "drop"
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        seen.reply = f"status {failure.status}"
        headers: dict[str, str] = {}
        if failure.retry_after_s is not None:
            headers["Retry-After"] = str(max(1, round(failure.retry_after_s + 0.499)))
            headers["retry-after-ms"] = str(int(failure.retry_after_s * 1000))
        kind = "rate_limit_exceeded" if failure.status == 429 else "server_error"
        error = {"message": f"test server: scripted {failure.status}", "type": kind, "code": kind}
        self._send(failure.status, {"error": error}, headers)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: _State


class ModelServer:
    """The test server; start with `with ModelServer() as server:` or `start()`/`stop()`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._httpd = _Server((host, port), _Handler)
        self._httpd.state = _State()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL to give as `--model-base-url` (ends in `/v1`)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def requests(self) -> list[Received]:
        """Every request received so far, in arrival order."""
        with self._httpd.state.lock:
            return list(self._httpd.state.requests)

    def script(self, match: str, steps: Sequence[Step], model: str | None = None) -> None:
        """Answer conversations whose user prompt contains `match` with `steps` (only those
        asking for `model`, the name the server receives, when given)."""
        with self._httpd.state.lock:
            self._httpd.state.scripts.append(Script(match, tuple(steps), model))

    def fail_next(self, requests: int, failure: Failure | None = None) -> None:
        """An outage: the next `requests` requests fail like `failure` (default HTTP 500),
        whichever conversation they belong to; later ones are answered by their scripts."""
        with self._httpd.state.lock:
            self._httpd.state.down.extend([failure or Failure.http(500)] * requests)

    def reset(self) -> None:
        """Forget scripts, attempts and received requests."""
        with self._httpd.state.lock:
            state = self._httpd.state
            state.scripts.clear()
            state.attempts.clear()
            state.requests.clear()
            state.down.clear()

    def start(self) -> ModelServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="backintel-model-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Release hanging requests, stop serving, close the socket."""
        self._httpd.state.stopping.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def unused_url() -> str:
    """A base URL on 127.0.0.1 where nothing listens: connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@contextmanager
def model_server(scripts: Mapping[str, Sequence[Step]] = {}) -> Iterator[ModelServer]:
    """A started server with `scripts` (match → steps), stopped on exit."""
    with ModelServer() as server:
        for match, steps in scripts.items():
            server.script(match, steps)
        yield server


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_backintel.testing.model_server", description=__doc__
    )
    parser.add_argument("--scripts", required=True, help="the scripts JSON file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="default: a free port")
    args = parser.parse_args(argv)
    try:
        scripts = parse_steps(json.loads(Path(args.scripts).read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        print(f"model_server: {args.scripts}: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with ModelServer(args.host, args.port) as server:
        for key, steps in scripts.items():
            server.script(model_and_match(key)[1], steps, model_and_match(key)[0])
        print(server.url, flush=True)
        stop.wait()
        print(f"served {len(server.requests)} request(s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
