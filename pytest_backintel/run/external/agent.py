"""`--analyst cmd:...`: an agent in its own process, measured from outside.

Per trial: the trial's tools as an MCP server (`analyst.mcp_tools`, `server.py`) behind a new
token, the agent started in its sandbox (`process.py`) with the question, the answer rules,
the MCP URL and token (and the model gateway's URLs and trial key, when the run has one) in
its environment; then how it ended decides the trial (`ending.py`). The record's tool calls
are the server's, never the agent's claims.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, Protocol

from opentelemetry import context as otel_context

from analyst.mcp_tools import TrialTools
from pytest_backintel.analyst_api import AnalystConfig, AnalystRun, AnalystTask
from pytest_backintel.options import UNSAFE_AGENT
from pytest_backintel.run.external.command import AgentCommand, parse_command
from pytest_backintel.run.external.ending import judge_ending
from pytest_backintel.run.external.process import GATEWAY_PORT, MCP_PORT, AgentRunner
from pytest_backintel.run.external.server import TrialServer
from pytest_backintel.sandbox.limits import Limits

__all__ = ["UNSAFE_NOTE", "ExternalAnalyst", "GatewayLike", "external_analyst"]

UNSAFE_NOTE = UNSAFE_AGENT


class GatewayLike(Protocol):
    """What the external analyst needs of the run's model gateway (`run/gateway.py`)."""

    def open_trial(self, trial_id: str) -> Any: ...

    def close_trial(self, token: str) -> Any: ...


class ExternalAnalyst:
    """An agent started per trial as its own process; every tool call observed server side."""

    kind: Literal["external"] = "external"

    def __init__(
        self,
        command: AgentCommand,
        *,
        unsandboxed: bool = False,
        gateway: GatewayLike | None = None,
        gateway_socket: Path | None = None,
        gateway_url: str | None = None,
        workdir: Path | None = None,
    ) -> None:
        self.command = command
        self.name = f"cmd:{command.text}"
        self.unsandboxed = unsandboxed
        self.gateway = gateway
        self.gateway_socket = gateway_socket
        self.gateway_url = gateway_url
        self.runner = AgentRunner(unsandboxed=unsandboxed, workdir=workdir)

    def _limits(self, task: AnalystTask) -> Limits:
        wall = task.limits.wall_time_s
        return replace(Limits(), wall_time_s=wall, cpu_time_s=max(1, int(wall * 2) + 1))

    def answer(self, task: AnalystTask) -> AnalystRun:
        trial_id = secrets.token_hex(8)
        folder = Path(tempfile.mkdtemp(prefix="bi-agent-"))
        sockets, home = folder / "s", folder / "home"
        sockets.mkdir(mode=0o755)
        home.mkdir()
        tools = TrialTools(
            task.connect,
            task.run_python,
            max_tool_calls=task.limits.max_tool_calls,
            question=task.question,
            rules=task.rules,
        )
        tools.parent_context = otel_context.get_current()
        server = TrialServer(tools, trial_id, sockets, tcp=self.unsandboxed).start()
        key = self.gateway.open_trial(trial_id) if self.gateway is not None else None
        try:
            env = self._env(task, server, trial_id, key)
            ports = {MCP_PORT: server.socket_path}
            if self.gateway_socket is not None:
                ports[GATEWAY_PORT] = self.gateway_socket
            result = self.runner.run(
                self.command,
                env,
                {p: s for p, s in ports.items() if s is not None},
                self._limits(task),
                home,
            )
        finally:
            server.close()
            usage = self.gateway.close_trial(key.token) if key is not None else None
            shutil.rmtree(folder, ignore_errors=True)
        return judge_ending(
            result, tools, server.refused, usage, task.limits, unsafe=self.unsandboxed
        )

    def _env(
        self, task: AnalystTask, server: TrialServer, trial_id: str, key: Any
    ) -> dict[str, str]:
        mcp_url = server.url if self.unsandboxed else f"http://127.0.0.1:{MCP_PORT}{server.path}"
        env = {
            "BACKINTEL_QUESTION": task.question,
            "BACKINTEL_RULES": task.rules,
            "BACKINTEL_MCP_URL": mcp_url,
            "BACKINTEL_MCP_TOKEN": server.token,
            "BACKINTEL_TRIAL": trial_id,
        }
        if key is not None:
            base = self.gateway_url if self.unsandboxed else f"http://127.0.0.1:{GATEWAY_PORT}"
            token = str(getattr(key, "token", key))
            env.update(
                OPENAI_BASE_URL=f"{base}/v1",
                OPENAI_API_KEY=token,
                ANTHROPIC_BASE_URL=str(base),
                ANTHROPIC_API_KEY=token,
            )
        return env

    def close(self) -> None:
        self.runner.close()


def external_analyst(
    spec: str, config: AnalystConfig, *, unsandboxed: bool = False, cwd: Path | None = None
) -> ExternalAnalyst:
    """The `cmd:` analyst `spec` names (the agent's folder checked against `cwd`)."""
    del config  # the limits arrive with each task
    return ExternalAnalyst(parse_command(spec, cwd or Path.cwd()), unsandboxed=unsandboxed)
