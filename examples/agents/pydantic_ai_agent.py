"""A Pydantic AI agent as an MCP client, measured by BackIntel Bench from outside.

Run it with `--analyst "cmd:python examples/agents/pydantic_ai_agent.py"` (see docs/agents.md).

The harness starts it once per trial with the question, the answer rules, the trial's MCP
server (URL and token) and the model gateway (Anthropic and OpenAI base URLs, the trial's key)
in its environment. It talks to its model through the Anthropic Messages API; it answers by
calling the `submit_answer` (or `refuse`) tool of the MCP server.
"""

import os

from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.providers.anthropic import AnthropicProvider

env = os.environ
tools = MCPToolset(
    env["BACKINTEL_MCP_URL"],
    headers={"Authorization": f"Bearer {env['BACKINTEL_MCP_TOKEN']}"},
)
model = AnthropicModel(
    env.get("AGENT_MODEL", "claude-sonnet-4-5"),
    provider=AnthropicProvider(
        base_url=env["ANTHROPIC_BASE_URL"], api_key=env["ANTHROPIC_API_KEY"]
    ),
)
agent = Agent(
    model,
    toolsets=[tools],
    instructions=(
        "You are a data analyst. Explore the store with the tools, compute the answer with "
        "SQL, then call submit_answer once (or refuse, naming what the data lacks).\n\n"
        + env.get("BACKINTEL_RULES", "")
    ),
)
result = agent.run_sync(env["BACKINTEL_QUESTION"])
print(result.output)
