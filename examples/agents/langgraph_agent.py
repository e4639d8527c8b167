"""A LangGraph ReAct agent whose tools are the trial's MCP tools, measured from outside.

Run it with `--analyst "cmd:python examples/agents/langgraph_agent.py"` (see docs/agents.md).

The model is LangChain's `ChatOpenAI`, streaming, pointed at the harness's model gateway
(`OPENAI_BASE_URL`, with the trial's key as `OPENAI_API_KEY`). The MCP tools become LangChain
tools through the `mcp` SDK's client session (`mcp_tools` below), which is what
`langchain-mcp-adapters` does; its current release (0.3) does not import with `mcp` 2.
"""

import asyncio
import os
from typing import Any

import httpx2
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

env = os.environ


def mcp_tools(session: ClientSession, listed: Any) -> list[StructuredTool]:
    """Each MCP tool as a LangChain tool that calls it through `session`."""

    def wrap(name: str) -> Any:
        async def call(**args: Any) -> str:
            result = await session.call_tool(name, args)
            return "".join(getattr(part, "text", "") for part in result.content)

        return call

    return [
        StructuredTool(
            name=tool.name,
            description=tool.description or tool.name,
            args_schema=tool.input_schema,
            coroutine=wrap(tool.name),
        )
        for tool in listed.tools
    ]


async def main() -> None:
    headers = {"Authorization": f"Bearer {env['BACKINTEL_MCP_TOKEN']}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        streamable_http_client(env["BACKINTEL_MCP_URL"], http_client=http) as streams,
        ClientSession(*streams[:2]) as session,
    ):
        await session.initialize()
        tools = mcp_tools(session, await session.list_tools())
        model = ChatOpenAI(
            model=env.get("AGENT_MODEL", "gpt-5.1"),
            base_url=env["OPENAI_BASE_URL"],
            api_key=env["OPENAI_API_KEY"],
            streaming=True,
            stream_usage=True,
        )
        prompt = (
            "You are a data analyst. Explore the store with the tools, compute the answer with "
            "SQL, then call submit_answer once (or refuse, naming what the data lacks).\n\n"
            + env.get("BACKINTEL_RULES", "")
        )
        agent = create_react_agent(model, tools, prompt=prompt)
        state = await agent.ainvoke(
            {"messages": [("user", env["BACKINTEL_QUESTION"])]}, {"recursion_limit": 40}
        )
        print(state["messages"][-1].content)


asyncio.run(main())
