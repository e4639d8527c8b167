"""An OpenAI Agents SDK agent, its tools from the trial's MCP server, measured from outside.

Run it with `--analyst "cmd:python examples/agents/openai_agents_agent.py"` (see docs/agents.md).

The SDK's default model client reads `OPENAI_BASE_URL` and `OPENAI_API_KEY`, which the harness
sets to its model gateway and the trial's key, and speaks the Responses API. Tracing to the
SDK's own service is turned off: the harness records the trial.
"""

import asyncio
import os

from agents import Agent, Runner, set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp

env = os.environ
set_tracing_disabled(True)


async def main() -> None:
    server = MCPServerStreamableHttp(
        {
            "url": env["BACKINTEL_MCP_URL"],
            "headers": {"Authorization": f"Bearer {env['BACKINTEL_MCP_TOKEN']}"},
        },
        client_session_timeout_seconds=60,
    )
    async with server:
        agent = Agent(
            name="analyst",
            model=env.get("AGENT_MODEL", "gpt-5.1"),
            mcp_servers=[server],
            instructions=(
                "You are a data analyst. Explore the store with the tools, compute the answer "
                "with SQL, then call submit_answer once (or refuse, naming what the data "
                "lacks).\n\n" + env.get("BACKINTEL_RULES", "")
            ),
        )
        result = await Runner.run(agent, env["BACKINTEL_QUESTION"], max_turns=20)
        print(result.final_output)


asyncio.run(main())
