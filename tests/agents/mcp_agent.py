"""A small external agent for the tests: an MCP client over Streamable HTTP (the real `mcp`
SDK), run by the harness as `--analyst cmd:"python mcp_agent.py"`.

It reads `plan.json` beside it: `mode` and, per question, the SQL and metric units a
reference-level analyst would use (`modes` may set a mode per question). Modes: reference
(answers through the submit tool), stdout (prints the contract object), hostile (tries to
read what it must not, then answers with what it read), sigkill, hang, silent (exits
without answering), twice (answers twice), after (calls a tool after answering),
malformed (prints a broken answer), crash, flood (ten list_tables first), model (asks its
model once through the gateway at OPENAI_BASE_URL, then answers as reference).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

PLAN = json.loads((Path(__file__).parent / "plan.json").read_text())


def _value(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        return float(text)


def _answer(question: str, result: str) -> dict[str, Any]:
    spec = PLAN["questions"][question]
    header, row = result.splitlines()[:2]
    values = dict(zip(header.split("\t"), row.split("\t"), strict=True))
    metrics = [
        {"name": name, "value": _value(values[name]), "unit": unit}
        for name, unit in spec["units"].items()
    ]
    evidence = [{"id": "e1", "kind": "sql", "code": spec["sql"], "metrics": list(spec["units"])}]
    return {"metrics": metrics, "evidence": evidence, "method": "one aggregate query"}


def _probe(what: str, action: Any) -> str:
    try:
        got = action()
    except Exception as exc:  # every refusal is what we expect to see
        line = f"{what}: refused ({type(exc).__name__}: {exc})"
    else:
        line = f"{what}: READ {str(got)[:200]!r}"
    print(line, file=sys.stderr, flush=True)
    return line


def _hostile(url: str) -> list[str]:
    lines = []
    for path in PLAN.get("forbidden_files", []):
        lines.append(_probe(f"open {path}", lambda p=path: Path(p).read_bytes()[:100]))
    for host, port in PLAN.get("forbidden_ports", []):
        lines.append(
            _probe(
                f"connect {host}:{port}",
                lambda h=host, p=port: (
                    socket.create_connection((h, p), timeout=2).close() or "open"
                ),
            )
        )
    other = url.replace(os.environ["BACKINTEL_TRIAL"], "0123456789abcdef")
    lines.append(_probe("another trial's path", lambda: _sync_call(other, "list_tables", {})))
    lines.append(_probe("no token", lambda: _sync_call(url, "list_tables", {}, token="")))
    return lines


def _sync_call(url: str, tool: str, args: dict[str, Any], token: str | None = None) -> str:
    return asyncio.run(_one_call(url, tool, args, token))


async def _one_call(url: str, tool: str, args: dict[str, Any], token: str | None) -> str:
    token = os.environ["BACKINTEL_MCP_TOKEN"] if token is None else token
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        streamable_http_client(url, http_client=http) as streams,
        ClientSession(*streams[:2]) as session,
    ):
        await session.initialize()
        result = await session.call_tool(tool, args)
        return "".join(getattr(c, "text", "") for c in result.content)


QUESTION = os.environ["BACKINTEL_QUESTION"]
MODE = PLAN.get("modes", {}).get(QUESTION, PLAN["mode"])


async def main(read: list[str]) -> None:
    mode = MODE
    url, question = os.environ["BACKINTEL_MCP_URL"], QUESTION
    if mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "hang":
        time.sleep(3600)
    if mode == "crash":
        raise RuntimeError("the agent's own bug")
    if mode == "silent":
        return
    if mode == "malformed":
        print('{"status": "answered", "metrics": "forty-two"}')
        return
    if mode == "model":
        import openai

        client = openai.OpenAI(max_retries=0)  # OPENAI_BASE_URL and the trial key: the gateway
        reply = client.chat.completions.create(
            model="any", messages=[{"role": "user", "content": question}]
        )
        print(f"model said: {reply.choices[0].message.content}", file=sys.stderr)
    headers = {"Authorization": f"Bearer {os.environ['BACKINTEL_MCP_TOKEN']}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        streamable_http_client(url, http_client=http) as streams,
        ClientSession(*streams[:2]) as session,
    ):
        await session.initialize()

        async def call(tool: str, **args: Any) -> str:
            result = await session.call_tool(tool, args)
            return "".join(getattr(c, "text", "") for c in result.content)

        if mode == "flood":
            for _ in range(10):
                await call("list_tables")
        listed = await session.list_tools()
        print("tools: " + ",".join(t.name for t in listed.tools), file=sys.stderr)
        tables = (await call("list_tables")).splitlines()
        if tables:
            await call("describe_table", name=tables[0])
        if "run_python" in [t.name for t in listed.tools]:
            print(await call("run_python", code="import backintel_store as bs\nprint(bs.tables())"),
                  file=sys.stderr)  # fmt: skip
        result = await call("run_sql", sql=PLAN["questions"][question]["sql"])
        answer = _answer(question, result)
        if read:
            answer["caveats"] = read
        if mode == "stdout":
            print(json.dumps({"status": "answered", **answer}))
            return
        print(await call("submit_answer", **answer), file=sys.stderr)
        if mode == "twice":
            await call("submit_answer", **answer)
        if mode == "after":
            print(await call("list_tables"), file=sys.stderr)


if MODE == "hostile":
    asyncio.run(main(_hostile(os.environ["BACKINTEL_MCP_URL"])))
else:
    asyncio.run(main([]))
