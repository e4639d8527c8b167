"""The scripted model's vocabulary: the turns (`Step`) a script serves, the failures it can
inject before a turn, what the server received (`Received`), the JSON form of scripts
(`parse_steps`), and the Chat Completions body a turn becomes. The HTTP server that serves
them is `pytest_backintel.testing.model_server`."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

__all__ = [
    "ANSWER_TOOL",
    "REFUSAL_TOOL",
    "Failure",
    "Received",
    "Script",
    "Step",
    "completion_body",
    "model_and_match",
    "parse_steps",
    "table_values",
    "user_prompt",
]

ANSWER_TOOL = "final_result_AnalystAnswer"
"""The output tool the default analyst's agent offers for a contract answer."""
REFUSAL_TOOL = "final_result_Refusal"

FailureKind = Literal["status", "drop", "hang"]


@dataclass(frozen=True)
class Failure:
    """How one attempt at a step fails instead of answering."""

    kind: FailureKind
    status: int = 500
    retry_after_s: float | None = None
    """Sent as `Retry-After` (whole seconds, rounded up) and `retry-after-ms`."""

    @classmethod
    def http(cls, status: int = 500, retry_after_s: float | None = None) -> Failure:
        return cls("status", status, retry_after_s)

    @classmethod
    def rate_limited(cls, retry_after_s: float = 1.0) -> Failure:
        return cls("status", 429, retry_after_s)

    @classmethod
    def dropped(cls) -> Failure:
        """The connection is closed without a response."""
        return cls("drop")

    @classmethod
    def hang(cls) -> Failure:
        """The request is read and never answered (until the server stops)."""
        return cls("hang")


@dataclass(frozen=True)
class Step:
    """One scripted assistant turn."""

    tool_calls: tuple[tuple[str, Mapping[str, Any] | str], ...] = ()
    """`(tool name, arguments)`; arguments given as a string are sent as they are (malformed)."""
    text: str | None = None
    """Prose content (with no tool call: prose instead of a tool call)."""
    usage: tuple[int, int] | None = (100, 10)
    """`(prompt_tokens, completion_tokens)`; None sends no `usage` at all."""
    delay_s: float = 0.0
    """Latency before the response is sent."""
    failures: tuple[Failure, ...] = ()
    """The first attempts at this step fail like this, one failure per attempt."""
    fill_from_result: bool = False
    """Fill the `value` of each metric in the call's arguments from the last tool result in
    the request (a tab-separated table with a column named as the metric), as a model reads
    the result of its query: the values come from the store, through the agent's tools."""

    @classmethod
    def call(cls, tool: str, args: Mapping[str, Any] | str | None = None, **kw: Any) -> Step:
        return cls(tool_calls=((tool, {} if args is None else args),), **kw)

    @classmethod
    def answer(
        cls,
        metrics: Sequence[Mapping[str, Any]],
        evidence: Sequence[Mapping[str, Any]],
        method: str = "scripted",
        **kw: Any,
    ) -> Step:
        """A contract answer through the agent's answer output tool."""
        args = {"metrics": list(metrics), "evidence": list(evidence), "method": method}
        return cls.call(ANSWER_TOOL, args | {"caveats": []}, **kw)

    @classmethod
    def answer_from_result(
        cls,
        tool: str,
        metrics: Sequence[Mapping[str, Any]],
        evidence: Sequence[Mapping[str, Any]],
        method: str = "scripted",
        **kw: Any,
    ) -> Step:
        """A call of the answer tool `tool` (e.g. an MCP server's `submit_answer`) whose metric
        values are read from the last tool result of the conversation (`fill_from_result`)."""
        args = {
            "metrics": [{**m, "value": None} for m in metrics],
            "evidence": list(evidence),
            "method": method,
            "caveats": [],
        }
        return cls.call(tool, args, fill_from_result=True, **kw)

    def filled(self, table: str) -> Step:
        """This step with its metric values read from `table` (tab-separated text); a metric
        whose column is not there keeps `None`."""
        if not self.fill_from_result:
            return self
        calls = []
        for name, args in self.tool_calls:
            if isinstance(args, Mapping) and isinstance(args.get("metrics"), list):
                names = [str(m.get("name")) for m in args["metrics"]]
                values = table_values(table, names)
                metrics = [{**m, "value": values.get(str(m.get("name")))} for m in args["metrics"]]
                args = {**args, "metrics": metrics}
            calls.append((name, args))
        return replace(self, tool_calls=tuple(calls), fill_from_result=False)

    @classmethod
    def refusal(cls, missing: Sequence[str], explanation: str, **kw: Any) -> Step:
        args = {"missing": list(missing), "explanation": explanation, "evidence": []}
        return cls.call(REFUSAL_TOOL, args, **kw)

    @classmethod
    def prose(cls, text: str, **kw: Any) -> Step:
        return cls(text=text, **kw)


@dataclass(frozen=True)
class Script:
    match: str
    """A substring of the conversation's user prompt (case-insensitive)."""
    steps: tuple[Step, ...]
    model: str | None = None
    """Only requests for this model name (as the server receives it, e.g. `qwen3`); None:
    any model. A model matrix's models are scripted apart this way."""

    def serves(self, prompt: str, model: object) -> bool:
        return self.match.lower() in prompt and (self.model is None or self.model == model)


def model_and_match(key: str) -> tuple[str | None, str]:
    """A scripts file's key: `@<model> <match>` scripts one model's conversations, a plain
    `<match>` every model's."""
    if key.startswith("@") and " " in key:
        model, _, match = key[1:].partition(" ")
        return model, match
    return None, key


@dataclass
class Received:
    """One request the server received, and what it did with it."""

    path: str
    model: str | None
    script: str | None
    step: int
    attempt: int
    tools: list[str]
    reply: str
    """`ok`, `status <n>`, `drop`, `hang`, `no script` or `exhausted`."""
    usage: tuple[int, int] | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The request's chat messages as sent (system, user, assistant and tool turns)."""
    received_at: float = 0.0
    """`time.time()` when the request arrived."""
    answered_at: float | None = None
    """`time.time()` when its reply was sent (None: no reply, or not yet)."""


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def table_values(table: str, names: Sequence[str]) -> dict[str, Any]:
    """The first row under the first tab-separated header line that names every one of
    `names`: `{name: value}` (numbers as numbers); {} when there is no such table."""
    lines = table.splitlines()
    for at, line in enumerate(lines[:-1]):
        header = line.split("\t")
        if all(n in header for n in names):
            row = lines[at + 1].split("\t")
            return {n: _number(row[header.index(n)]) for n in names if header.index(n) < len(row)}
    return {}


def user_prompt(messages: Sequence[Mapping[str, Any]]) -> str:
    parts: list[str] = []
    for msg in messages:
        if msg.get("role") != "user":
            continue
        content = msg.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [str(c.get("text", "")) for c in content if isinstance(c, dict)]
    return "\n".join(parts).lower()


def completion_body(model: str, step: Step, index: int) -> dict[str, Any]:
    calls = [
        {
            "id": f"call_{index}_{n}",
            "type": "function",
            "function": {
                "name": name,
                "arguments": args if isinstance(args, str) else json.dumps(args),
            },
        }
        for n, (name, args) in enumerate(step.tool_calls)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": step.text}
    if calls:
        message["tool_calls"] = calls
    body: dict[str, Any] = {
        "id": f"chatcmpl-{index}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
    }
    if step.usage is not None:
        prompt, completion = step.usage
        body["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
    return body


_KINDS = ("call", "answer", "answer_from_result", "refusal", "prose")


def _step(turn: Any, where: str) -> Step:
    if not isinstance(turn, dict) or sum(k in turn for k in _KINDS) != 1:
        raise ValueError(f"{where}: a turn gives exactly one of {', '.join(_KINDS)}")
    extra: dict[str, Any] = {}
    if "usage" in turn:
        extra["usage"] = None if turn["usage"] is None else tuple(turn["usage"])
    if "delay_s" in turn:
        extra["delay_s"] = float(turn["delay_s"])
    if "call" in turn:
        return Step.call(str(turn["call"]), turn.get("args"), **extra)
    if "answer" in turn:
        body = turn["answer"]
        return Step.answer(
            body["metrics"], body["evidence"], body.get("method", "scripted"), **extra
        )
    if "answer_from_result" in turn:
        body = turn["answer_from_result"]
        tool = str(body.get("tool", "submit_answer"))
        method = body.get("method", "scripted")
        return Step.answer_from_result(tool, body["metrics"], body["evidence"], method, **extra)
    if "refusal" in turn:
        return Step.refusal(turn["refusal"]["missing"], turn["refusal"]["explanation"], **extra)
    return Step.prose(str(turn["prose"]), **extra)


def parse_steps(doc: Any) -> dict[str, list[Step]]:
    """Scripts from their JSON form; `ValueError` naming the script and turn that is wrong."""
    if not isinstance(doc, dict):
        raise ValueError("a scripts file maps a question substring to a list of turns")
    out: dict[str, list[Step]] = {}
    for match, turns in doc.items():
        if not isinstance(turns, list):
            raise ValueError(f"{match!r}: a list of turns, got {turns!r:.60}")
        try:
            out[match] = [_step(t, f"{match!r} turn {i}") for i, t in enumerate(turns, 1)]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{match!r}: a turn lacks or mistypes {exc}") from exc
    return out
