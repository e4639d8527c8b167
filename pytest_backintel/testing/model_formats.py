"""The scripted model's three wire formats: OpenAI Chat Completions, OpenAI Responses and
Anthropic Messages, each as one JSON body or as the server-sent events of a stream.

`Api.of(path)` names the format a request path asks for; `conversation(api, request)` reads
the user prompt, the step (the assistant turns already in the request) and the offered tool
names; `reply_body` and `reply_events` turn a scripted `Step` into that API's response. The
token counts a step declares are the ones each format reports (`prompt, completion`), so a
test can compare what a client or a gateway counted with what the server sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pytest_backintel.testing.model_script import Step, completion_body, user_prompt

__all__ = [
    "Api",
    "api_of",
    "conversation",
    "last_tool_output",
    "reply_body",
    "reply_events",
    "sse",
]

Api = Literal["chat", "responses", "messages"]

_ASSISTANT_ITEMS = frozenset({"function_call", "reasoning", "custom_tool_call"})


def api_of(path: str) -> Api | None:
    """The API a POST path asks for (None: not one the server speaks)."""
    path = path.split("?", 1)[0].rstrip("/")
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/messages"):
        return "messages"
    return None


def _text_parts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [str(c.get("text", "")) for c in content if isinstance(c, dict)]
    return []


def _responses_turns(items: Sequence[Any]) -> int:
    """Assistant turns in a Responses input: maximal runs of assistant-side items."""
    turns, inside = 0, False
    for item in items:
        if not isinstance(item, dict):
            continue
        mine = item.get("type") in _ASSISTANT_ITEMS or item.get("role") == "assistant"
        turns += mine and not inside
        inside = mine
    return turns


def conversation(api: Api, request: Mapping[str, Any]) -> tuple[str, int, list[str]]:
    """`(lower-cased user prompt, step index, tool names)` of a request in format `api`."""
    if api == "responses":
        raw = request.get("input")
        items: list[Any] = [{"role": "user", "content": raw}] if isinstance(raw, str) else []
        items += raw if isinstance(raw, list) else []
        prompt = "\n".join(
            part
            for item in items
            if isinstance(item, dict) and item.get("role") == "user"
            for part in _text_parts(item.get("content"))
        )
        tools = [str(t.get("name", "")) for t in request.get("tools") or []]
        return prompt.lower(), _responses_turns(items), tools
    messages = request.get("messages") or []
    index = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
    if api == "messages":
        tools = [str(t.get("name", "")) for t in request.get("tools") or []]
    else:
        tools = [str(t.get("function", {}).get("name", "")) for t in request.get("tools") or []]
    return user_prompt(messages), index, tools


def _texts(value: Any) -> list[str]:
    """The text inside a tool result as a framework sent it: a string (perhaps JSON of MCP
    content blocks), or content parts with `text`."""
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except ValueError:
            return [value]
        return _texts(decoded) if isinstance(decoded, dict | list) else [value]
    if isinstance(value, list):
        return [t for part in value for t in _texts(part)]
    if isinstance(value, dict):
        for key in ("text", "content", "output", "result"):
            if key in value:
                return _texts(value[key])
    return []


def last_tool_output(api: Api, request: Mapping[str, Any]) -> str:
    """The text of the last tool result in a request ('' when there is none)."""
    found: Any = None
    if api == "responses":
        items = request.get("input")
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                found = item.get("output")
    elif api == "chat":
        for message in request.get("messages") or []:
            if isinstance(message, dict) and message.get("role") == "tool":
                found = message.get("content")
    else:
        for message in request.get("messages") or []:
            content = message.get("content") if isinstance(message, dict) else None
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    found = block.get("content")
    return "\n".join(_texts(found))


def _arguments(args: Mapping[str, Any] | str) -> str:
    return args if isinstance(args, str) else json.dumps(args)


def _responses_output(step: Step, index: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if step.text is not None:
        out.append(
            {
                "type": "message",
                "id": f"msg_{index}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": step.text, "annotations": []}],
            }
        )
    for n, (name, args) in enumerate(step.tool_calls):
        out.append(
            {
                "type": "function_call",
                "id": f"fc_{index}_{n}",
                "call_id": f"call_{index}_{n}",
                "name": name,
                "arguments": _arguments(args),
                "status": "completed",
            }
        )
    return out


def _responses_body(model: str, step: Step, index: int, status: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": f"resp_{index}",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": model,
        "output": _responses_output(step, index) if status == "completed" else [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "text": {"format": {"type": "text"}},
        "usage": None,
    }
    if step.usage is not None and status == "completed":
        prompt, completion = step.usage
        body["usage"] = {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion,
        }
    return body


def _messages_content(step: Step, index: int) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    if step.text is not None:
        content.append({"type": "text", "text": step.text})
    for n, (name, args) in enumerate(step.tool_calls):
        value = args if not isinstance(args, str) else {"_unparsed": args}
        content.append(
            {"type": "tool_use", "id": f"toolu_{index}_{n}", "name": name, "input": value}
        )
    return content


def _messages_body(model: str, step: Step, index: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": f"msg_{index}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _messages_content(step, index),
        "stop_reason": "tool_use" if step.tool_calls else "end_turn",
        "stop_sequence": None,
    }
    if step.usage is not None:
        body["usage"] = {"input_tokens": step.usage[0], "output_tokens": step.usage[1]}
    return body


def reply_body(api: Api, model: str, step: Step, index: int) -> dict[str, Any]:
    """The whole (non-streamed) response to one step."""
    if api == "responses":
        return _responses_body(model, step, index, "completed")
    if api == "messages":
        return _messages_body(model, step, index)
    return completion_body(model, step, index)


def sse(data: Mapping[str, Any] | str, event: str | None = None) -> bytes:
    """One server-sent event."""
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


def _chat_events(model: str, step: Step, index: int, usage: bool) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-{index}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    out = [sse(chunk({"role": "assistant", "content": ""}))]
    if step.text is not None:
        out.append(sse(chunk({"content": step.text})))
    for n, (name, args) in enumerate(step.tool_calls):
        call = {"index": n, "id": f"call_{index}_{n}", "type": "function"}
        out.append(sse(chunk({"tool_calls": [call | {"function": {"name": name}}]})))
        delta = {"index": n, "function": {"arguments": _arguments(args)}}
        out.append(sse(chunk({"tool_calls": [delta]})))
    out.append(sse(chunk({}, "tool_calls" if step.tool_calls else "stop")))
    if usage and step.usage is not None:
        body = completion_body(model, step, index)
        out.append(sse({**chunk({}), "choices": [], "usage": body["usage"]}))
    return [*out, sse("[DONE]")]


def _responses_events(model: str, step: Step, index: int) -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    events.append(
        ("response.created", {"response": _responses_body(model, step, index, "in_progress")})
    )
    for n, item in enumerate(_responses_output(step, index)):
        if item["type"] == "function_call":
            events.append(
                (
                    "response.output_item.added",
                    {"output_index": n, "item": item | {"arguments": "", "status": "in_progress"}},
                )
            )
            events.append(
                (
                    "response.function_call_arguments.delta",
                    {"output_index": n, "item_id": item["id"], "delta": item["arguments"]},
                )
            )
            events.append(
                (
                    "response.function_call_arguments.done",
                    {"output_index": n, "item_id": item["id"], "arguments": item["arguments"]},
                )
            )
        else:
            text = item["content"][0]["text"]
            events.append(
                (
                    "response.output_item.added",
                    {"output_index": n, "item": item | {"content": [], "status": "in_progress"}},
                )
            )
            where = {"output_index": n, "item_id": item["id"], "content_index": 0}
            events.append(
                (
                    "response.content_part.added",
                    where | {"part": {"type": "output_text", "text": "", "annotations": []}},
                )
            )
            events.append(("response.output_text.delta", where | {"delta": text, "logprobs": []}))
            events.append(("response.output_text.done", where | {"text": text, "logprobs": []}))
            events.append(("response.content_part.done", where | {"part": item["content"][0]}))
        events.append(("response.output_item.done", {"output_index": n, "item": item}))
    events.append(
        ("response.completed", {"response": _responses_body(model, step, index, "completed")})
    )
    return events


def _messages_events(model: str, step: Step, index: int) -> list[tuple[str, dict[str, Any]]]:
    start = _messages_body(model, step, index) | {"content": [], "stop_reason": None}
    prompt = step.usage[0] if step.usage is not None else None
    start["usage"] = {"input_tokens": prompt, "output_tokens": 0} if prompt is not None else None
    if start["usage"] is None:
        del start["usage"]
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"message": start})]
    for n, block in enumerate(_messages_content(step, index)):
        if block["type"] == "text":
            opening, delta = (
                {"type": "text", "text": ""},
                {"type": "text_delta", "text": block["text"]},
            )
        else:
            raw = step.tool_calls[n - (step.text is not None)][1]
            opening = block | {"input": {}}
            delta = {"type": "input_json_delta", "partial_json": _arguments(raw)}
        events.append(("content_block_start", {"index": n, "content_block": opening}))
        events.append(("content_block_delta", {"index": n, "delta": delta}))
        events.append(("content_block_stop", {"index": n}))
    stop = {"stop_reason": "tool_use" if step.tool_calls else "end_turn", "stop_sequence": None}
    final: dict[str, Any] = {"delta": stop}
    if step.usage is not None:
        final["usage"] = {"output_tokens": step.usage[1]}
    events += [("message_delta", final), ("message_stop", {})]
    return events


def reply_events(api: Api, model: str, step: Step, index: int, usage: bool) -> list[bytes]:
    """The streamed response to one step, event by event; `usage` asks a Chat Completions
    stream for its closing usage chunk (`stream_options.include_usage`)."""
    if api == "chat":
        return _chat_events(model, step, index, usage)
    typed = (
        _responses_events(model, step, index)
        if api == "responses"
        else _messages_events(model, step, index)
    )
    if api == "responses":
        return [
            sse({"type": kind, "sequence_number": n} | data, kind)
            for n, (kind, data) in enumerate(typed)
        ]
    return [sse({"type": kind} | data, kind) for kind, data in typed]
