"""The trial's MCP server itself, through the real `mcp` client: each trial its own path and
token; a request with another trial's token or URL, or none, is refused, recorded, and reads
nothing; a finished trial's token reaches nothing; the same limits as the built-in analyst."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from helpers import orders_store
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from analyst.mcp_tools import TrialTools
from pytest_backintel.run.external.command import AgentCommandError, parse_command
from pytest_backintel.run.external.ending import stdout_answer
from pytest_backintel.run.external.server import TrialServer
from stores.base import ProvisionedStore


async def _call(url: str, token: str | None, tool: str, **args: Any) -> str:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        streamable_http_client(url, http_client=http) as streams,
        ClientSession(*streams[:2]) as session,
    ):
        await session.initialize()
        result = await session.call_tool(tool, args)
        return "".join(getattr(c, "text", "") for c in result.content)


def call(url: str, token: str | None, tool: str, **args: Any) -> str:
    return asyncio.run(_call(url, token, tool, **args))


def _flat(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return " | ".join(_flat(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


def failure(url: str, token: str | None, tool: str, **args: Any) -> str:
    """What the client saw of a refused request (it must be refused)."""
    try:
        call(url, token, tool, **args)
    except Exception as exc:
        return _flat(exc)
    raise AssertionError(f"{tool} on {url} was not refused")


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[ProvisionedStore, ProvisionedStore]]:
    backend_a, a = orders_store(tmp_path / "a", 3)
    backend_b, b = orders_store(tmp_path / "b", 5)
    yield a, b
    backend_a.teardown_session()
    backend_b.teardown_session()


def test_a_token_reaches_its_own_trial_only_and_dies_with_it(
    stores: tuple[ProvisionedStore, ProvisionedStore], tmp_path: Path
) -> None:
    a = TrialServer(TrialTools(stores[0].connect, None, max_tool_calls=10), "aaaa", None).start()
    b = TrialServer(TrialTools(stores[1].connect, None, max_tool_calls=10), "bbbb", None).start()
    sql = "SELECT COUNT(*) AS n FROM orders"
    assert "\n3\n" in call(a.url, a.token, "run_sql", sql=sql)
    assert "\n5\n" in call(b.url, b.token, "run_sql", sql=sql)
    assert "error" in failure(b.url, a.token, "run_sql", sql=sql)  # a's token on b's server
    assert "error" in failure(b.url, None, "run_sql", sql=sql)  # no token at all
    other_path = b.url.replace("bbbb", "aaaa")  # b's token on a's path, at b's server
    assert "Not Found" in failure(other_path, b.token, "run_sql", sql=sql)
    assert [r["reason"] for r in b.refused] == [
        "not this trial's token",
        "no bearer token",
        "not this trial's path",
    ]
    assert len(b.tools.calls) == 1  # nothing ran for the refused requests
    a.close()
    gone = failure(a.url, a.token, "run_sql", sql=sql)  # a finished trial's token
    assert "onnect" in gone or "error" in gone  # the server is gone, or refuses while it goes
    assert all(r["reason"] == "the trial is over" for r in a.refused)
    assert a.tools.calls[-1]["tool"] == "run_sql"
    assert len(a.tools.calls) == 1
    b.close()


def test_the_tool_call_limit_and_answers_are_enforced_server_side(
    stores: tuple[ProvisionedStore, ProvisionedStore],
) -> None:
    tools = TrialTools(stores[0].connect, None, max_tool_calls=2)
    server = TrialServer(tools, "cccc", None).start()
    try:
        assert "orders" in call(server.url, server.token, "list_tables")
        bad = call(server.url, server.token, "run_sql", sql="DELETE FROM orders")
        assert bad.startswith("ERROR")
        assert "limit (2)" in call(server.url, server.token, "list_tables")
        assert tools.over_budget
        assert [c.get("refused") for c in tools.calls] == [False, False, True]
        assert tools.calls[1]["error"].startswith("ERROR")
    finally:
        server.close()


def test_an_invalid_answer_is_an_error_the_agent_reads_and_a_refusal_is_recorded(
    stores: tuple[ProvisionedStore, ProvisionedStore],
) -> None:
    tools = TrialTools(stores[0].connect, None, max_tool_calls=10)
    server = TrialServer(tools, "dddd", None).start()
    try:
        text = call(server.url, server.token, "refuse", missing=[], explanation="no")
        assert text.startswith("ERROR: not a valid answer")
        assert not tools.answers
        assert call(server.url, server.token, "refuse", missing=["cost"], explanation="x") == (
            "recorded"
        )
        assert tools.answers[0].status == "refused"
    finally:
        server.close()


def test_stdout_answers_are_parsed_strictly() -> None:
    good = '{"status": "refused", "missing": ["cost"], "explanation": "no cost data"}'
    assert stdout_answer(f"thinking...\n{good}\n")[0] is not None
    assert stdout_answer("")[0] is None
    assert stdout_answer("")[1] is None
    assert "no JSON object" in (stdout_answer("42 orders")[1] or "")
    assert "breaks the contract" in (stdout_answer('{"status": "answered"}')[1] or "")


def test_an_agent_folder_that_holds_the_run_is_refused(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text("print(1)\n")
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "agent.py").write_text("print(1)\n")
    project = tmp_path / "project"
    project.mkdir()
    with pytest.raises(AgentCommandError, match="folder of its own"):
        parse_command(f"cmd:python {tmp_path / 'agent.py'}", project)
    command = parse_command("cmd:python ../agents/agent.py --fast", project)
    assert command.argv_inside == ["python", "/agent/agent.py", "--fast"]
    assert command.folder == tmp_path / "agents"


def _serve(*args: str, cwd: Path | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "backintel"), "serve-tools", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )


def test_serve_tools_serves_a_development_scenario_until_interrupted() -> None:
    proc = _serve("l1-item-grain")
    try:
        assert proc.stdout is not None
        lines: dict[str, str] = {}
        deadline = time.monotonic() + 120
        while "token" not in lines and time.monotonic() < deadline:
            key, _, value = proc.stdout.readline().partition(": ")
            lines[key] = value.strip()
        assert "order item rows" in lines["question"]
        assert "order_items" in call(lines["url"], lines["token"], "list_tables")
        assert "error" in failure(lines["url"], "guess", "list_tables")
    finally:
        proc.send_signal(2)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "1 tool call(s) served" in err


def test_serve_tools_refuses_a_reserved_scenario(tmp_path: Path) -> None:
    from pytest_backintel.collect.loading import DEFINITIONS_DIR

    source = (DEFINITIONS_DIR / "level1" / "l1-item-grain.scenario.yaml").read_text()
    (tmp_path / "r.scenario.yaml").write_text(
        source.replace("split: development", "split: reserved").replace(
            "$schema=../../scenario.schema.json", "$schema=x"
        )
    )
    proc = _serve("l1-item-grain", "--scenarios", str(tmp_path))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "reserved scenario" in err
    assert "only development scenarios" in err


def test_serve_tools_speaks_mcp_over_stdio_to_a_client_that_spawns_it() -> None:
    from mcp.client.stdio import StdioServerParameters, stdio_client

    async def session() -> tuple[list[str], str]:
        params = StdioServerParameters(
            command=str(Path(sys.executable).parent / "backintel"),
            args=["serve-tools", "l1-item-grain", "--stdio"],
            env=dict(os.environ),
        )
        async with stdio_client(params) as streams, ClientSession(*streams[:2]) as mcp:
            await mcp.initialize()
            names = [t.name for t in (await mcp.list_tools()).tools]
            result = await mcp.call_tool("run_sql", {"sql": "SELECT COUNT(*) AS n FROM orders"})
            return names, "".join(getattr(c, "text", "") for c in result.content)

    names, text = asyncio.run(session())
    assert names == ["list_tables", "describe_table", "run_sql", "submit_answer", "refuse"]
    assert text.startswith("n\n")
    assert "[1 row(s)]" in text


def test_an_external_agents_method_hash_covers_its_folder_and_command(tmp_path: Path) -> None:
    from pytest_backintel.records.method_hash import method_hash

    (tmp_path / "agent.py").write_text("print(1)\n")
    (tmp_path / "prompt.txt").write_text("be careful\n")
    spec = f"cmd:python {tmp_path / 'agent.py'}"
    first = method_hash(spec, "external", {"model": None})
    assert method_hash(spec, "external", {"model": None}) == first
    (tmp_path / "prompt.txt").write_text("be bold\n")
    assert method_hash(spec, "external", {"model": None}) != first
    assert method_hash(spec + " --fast", "external", {"model": None}) != first
    assert method_hash(spec, "external", {"model": "openai:gpt-5.1"}) != first


def test_an_external_agents_method_hash_takes_dependencies_by_their_lock_file(
    tmp_path: Path,
) -> None:
    """`npm ci` in the agent's folder (another test, another process) rewrites node_modules
    while a run starts: that is neither a different method nor an error."""
    from pytest_backintel.records.method_hash import folder_files, method_hash
    from pytest_backintel.records.writer import hash_files

    (tmp_path / "agent.py").write_text("print(1)\n")
    (tmp_path / "node" / "node_modules" / "dep").mkdir(parents=True)
    (tmp_path / "node" / "node_modules" / "dep" / "index.js").write_text("1\n")
    (tmp_path / "node" / "package-lock.json").write_text('{"v": 1}\n')
    spec = f"cmd:python {tmp_path / 'agent.py'}"
    first = method_hash(spec, "external", {"model": None})
    (tmp_path / "node" / "node_modules" / "dep" / "index.js").write_text("2\n")
    assert method_hash(spec, "external", {"model": None}) == first
    (tmp_path / "node" / "package-lock.json").write_text('{"v": 2}\n')
    assert method_hash(spec, "external", {"model": None}) != first
    assert folder_files(tmp_path / "gone") == []
    listed = folder_files(tmp_path)
    (tmp_path / "agent.py").unlink()
    assert hash_files(listed, tmp_path) == hash_files(folder_files(tmp_path), tmp_path)
