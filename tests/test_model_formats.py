"""The scripted model server's three formats: which step a request is at, and the last tool
result as each framework sends it (plain text, JSON of MCP content blocks, content parts)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_backintel.testing.model_formats import Api, conversation, last_tool_output

TABLE = "n\tshare\n42\t0.25"
MCP_JSON = json.dumps({"type": "text", "text": TABLE, "annotations": None})


@pytest.mark.parametrize("sent", [TABLE, MCP_JSON, [{"type": "text", "text": TABLE}]])
@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_the_last_tool_result_is_read_in_every_format(api: Api, sent: Any) -> None:
    old: Any = "n\tshare\n1\t0.5"
    if api == "chat":
        request: dict[str, Any] = {
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "tool", "tool_call_id": "a", "content": old},
                {"role": "tool", "tool_call_id": "b", "content": sent},
            ]
        }
    elif api == "responses":
        request = {
            "input": [
                {"role": "user", "content": "q"},
                {"type": "function_call_output", "call_id": "a", "output": old},
                {"type": "function_call_output", "call_id": "b", "output": sent},
            ]
        }
    else:
        request = {
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "user", "content": [{"type": "tool_result", "content": old}]},
                {"role": "user", "content": [{"type": "tool_result", "content": sent}]},
            ]
        }
    assert last_tool_output(api, request) == TABLE
    assert last_tool_output(api, {"messages": [], "input": "q"}) == ""


def test_a_responses_turn_is_a_run_of_assistant_items() -> None:
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "How many?"}]},
        {"type": "reasoning", "id": "r1"},
        {"type": "function_call", "call_id": "a", "name": "run_sql", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "list_tables", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": "x"},
        {"type": "function_call_output", "call_id": "b", "output": "y"},
        {"role": "assistant", "content": "done"},
    ]
    tools = [{"type": "function", "name": "run_sql"}]
    assert conversation("responses", {"input": items, "tools": tools}) == (
        "how many?",
        2,
        ["run_sql"],
    )
    assert conversation("responses", {"input": "How many?"})[:2] == ("how many?", 0)
