"""A trial's message history (Pydantic AI's JSON form) as an ordered list of transcript
entries: model turns, tool calls with their arguments, bounded tool results."""

from __future__ import annotations

from typing import Any

from reports.view.text import RESULT_LIMIT, as_text

__all__ = ["transcript"]

Entry = dict[str, str]

_REQUEST_PARTS = {
    "system-prompt": "system prompt",
    "user-prompt": "user",
    "tool-return": "tool result",
    "retry-prompt": "retry prompt",
}
_RESPONSE_PARTS = {"text": "model", "thinking": "model thinking", "tool-call": "tool call"}


def _entry(kind: str, title: str, text: str, **extra: str) -> Entry:
    return {"kind": kind, "title": title, "text": text, **extra}


def _request_part(part: dict[str, Any]) -> Entry:
    kind = str(part.get("part_kind", "unknown"))
    label = _REQUEST_PARTS.get(kind, kind)
    if kind == "tool-return":
        name = str(part.get("tool_name", "?"))
        return _entry(
            "tool_result",
            f"{label}: {name}",
            as_text(part.get("content"), RESULT_LIMIT),
            call_id=str(part.get("tool_call_id") or ""),
        )
    if kind == "retry-prompt":
        tool = part.get("tool_name")
        title = f"{label}: {tool}" if tool else label
        return _entry("retry", title, as_text(part.get("content"), RESULT_LIMIT))
    return _entry(
        "user" if kind == "user-prompt" else "system", label, as_text(part.get("content"))
    )


def _response_part(part: dict[str, Any], model: str) -> Entry:
    kind = str(part.get("part_kind", "unknown"))
    label = _RESPONSE_PARTS.get(kind, kind)
    if kind == "tool-call":
        name = str(part.get("tool_name", "?"))
        return _entry(
            "tool_call",
            f"{label}: {name}",
            as_text(part.get("args")),
            call_id=str(part.get("tool_call_id") or ""),
        )
    title = f"{label} ({model})" if model else label
    return _entry("model", title, as_text(part.get("content")))


def _from_messages(messages: list[Any]) -> list[Entry]:
    entries: list[Entry] = []
    instructions: str | None = None
    for message in messages:
        if not isinstance(message, dict):
            entries.append(_entry("unknown", "unreadable message", as_text(message)))
            continue
        found = message.get("parts")
        parts: list[Any] = found if isinstance(found, list) else []
        if message.get("kind") == "request":
            said = message.get("instructions")
            if isinstance(said, str) and said != instructions:
                instructions = said
                entries.append(_entry("system", "instructions", as_text(said)))
            entries += [_request_part(p) for p in parts if isinstance(p, dict)]
        elif message.get("kind") == "response":
            model = str(message.get("model_name") or "")
            entries += [_response_part(p, model) for p in parts if isinstance(p, dict)]
        else:
            entries.append(_entry("unknown", str(message.get("kind", "message")), as_text(message)))
    return entries


def transcript(record: dict[str, Any]) -> list[Entry]:
    """The trial's transcript in order: from `messages` when recorded, else from the bare
    `tool_calls` list (arguments only); empty when neither was recorded."""
    messages = record.get("messages")
    if isinstance(messages, list) and messages:
        return _from_messages(messages)
    calls = record.get("tool_calls")
    if isinstance(calls, list):
        return [
            _entry("tool_call", f"tool call: {c.get('tool', '?')}", as_text(c.get("args")))
            if isinstance(c, dict)
            else _entry("tool_call", "tool call", as_text(c))
            for c in calls
        ]
    return []
