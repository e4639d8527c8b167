"""An agent outside the harness's process: its trial's tools over MCP, the agent in its own
(sandboxed) process, every way it can end a recorded outcome."""
