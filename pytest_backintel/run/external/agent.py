"""`--analyst cmd:...`: an agent in its own process, measured from outside.

Per trial: the trial's tools as an MCP server (`analyst.mcp_tools`, `server.py`) behind a new
token, the agent started in its sandbox (`process.py`) with the question, the answer rules,
the MCP URL and token (and the model gateway's URLs and trial key, when the run has one) in
its environment; then how it ended decides the trial (`ending.py`). The record's tool calls
are the server's, never the agent's claims.
"""

from __future__ import annotations

import atexit
import secrets
import shutil
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from opentelemetry import context as otel_context

from analyst.mcp_tools import TrialTools
from pytest_backintel.analyst_api import (
    UNSAFE_AGENT,
    AnalystConfig,
    AnalystKind,
    AnalystRun,
    AnalystTask,
    InfraError,
)
from pytest_backintel.options import REPLAY_PREFIX
from pytest_backintel.records.cassettes import CassetteError, find_cassette_dir, read_exchanges
from pytest_backintel.run.external.command import AgentCommand, AgentCommandError, parse_command
from pytest_backintel.run.external.ending import judge_ending
from pytest_backintel.run.external.process import GATEWAY_PORT, MCP_PORT, AgentRunner
from pytest_backintel.run.external.server import TrialServer
from pytest_backintel.run.gateway import GatewayConfigError, ModelGateway, Upstream
from pytest_backintel.sandbox.base import SandboxError
from pytest_backintel.sandbox.limits import Limits

__all__ = ["UNSAFE_NOTE", "ExternalAnalyst", "external_analyst"]

UNSAFE_NOTE = UNSAFE_AGENT
AGENT_ADDRESS_HEADROOM_MB = 30 * 1024
"""Virtual address space an agent may reserve beyond its memory limit: Node's `fetch` maps
some 10 GB for WebAssembly (undici's HTTP parser) before it sends a byte, as Go and JVM
runtimes reserve large arenas. Memory actually used is still bounded (RLIMIT_DATA, cgroup)."""


class ExternalAnalyst:
    """An agent started per trial as its own process; every tool call observed server side."""

    kind: AnalystKind = "external"

    def __init__(
        self,
        command: AgentCommand,
        *,
        unsandboxed: bool = False,
        upstream: Upstream | None = None,
        replay: Path | None = None,
        workdir: Path | None = None,
    ) -> None:
        self.command = command
        self.name = f"cmd:{command.text}"
        self.unsandboxed = unsandboxed
        self.upstream = upstream
        """The configured model, reached through the run's gateway (None: no model)."""
        self.replay = replay
        """`--model replay:DIR`: the cassettes folder whose recorded model exchanges the
        gateway serves back, trial by trial; no model is called."""
        self._gateway: ModelGateway | None = None
        self._gateway_dir: Path | None = None
        self._lock = threading.Lock()
        self.runner = AgentRunner(unsandboxed=unsandboxed, workdir=workdir)

    @property
    def gateway(self) -> ModelGateway | None:
        """The run's model gateway, started on the first trial (None without a model)."""
        if self.upstream is None and self.replay is None:
            return None
        with self._lock:
            if self._gateway is None:
                self._gateway_dir = Path(tempfile.mkdtemp(prefix="bi-gw-"))
                self._gateway_dir.chmod(0o755)
                socket_path = self._gateway_dir / "gateway.sock"
                self._gateway = ModelGateway(self.upstream, socket_path=socket_path).start()
            return self._gateway

    def _recorded(self, task: AnalystTask) -> list[dict[str, Any]]:
        """The trial's recorded model exchanges (`--model replay:DIR`)."""
        assert self.replay is not None
        if task.case_key is None:
            raise CassetteError("a replayed trial needs its case key to find its recording")
        return read_exchanges(self.replay, task.case_key)

    def _limits(self, task: AnalystTask) -> Limits:
        wall = task.limits.wall_time_s
        return replace(
            Limits(),
            wall_time_s=wall,
            cpu_time_s=max(1, int(wall * 2) + 1),
            address_space_headroom_mb=AGENT_ADDRESS_HEADROOM_MB,
        )

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
        gateway = self.gateway
        recorded = self._recorded(task) if self.replay is not None else None
        name = task.case_key or trial_id
        key = gateway.open_trial(name, task.limits, replay=recorded) if gateway else None
        try:
            env = self._env(task, server, trial_id)
            ports = {MCP_PORT: server.socket_path}
            if gateway is not None and key is not None:
                inside = f"http://127.0.0.1:{GATEWAY_PORT}"
                env.update(gateway.agent_env(key, None if self.unsandboxed else inside))
                ports[GATEWAY_PORT] = gateway.socket_path
            try:
                result = self.runner.run(
                    self.command,
                    env,
                    {p: s for p, s in ports.items() if s is not None},
                    self._limits(task),
                    home,
                )
            except SandboxError as exc:
                raise InfraError(f"the external agent's sandbox failed: {exc}") from exc
        finally:
            server.close()
            usage = gateway.close_trial(key) if gateway is not None and key is not None else None
            shutil.rmtree(folder, ignore_errors=True)
        return judge_ending(
            result, tools, server.refused, usage, task.limits, unsafe=self.unsandboxed
        )

    def _env(self, task: AnalystTask, server: TrialServer, trial_id: str) -> dict[str, str]:
        mcp_url = server.url if self.unsandboxed else f"http://127.0.0.1:{MCP_PORT}{server.path}"
        env = {
            "BACKINTEL_QUESTION": task.question,
            "BACKINTEL_RULES": task.rules,
            "BACKINTEL_MCP_URL": mcp_url,
            "BACKINTEL_MCP_TOKEN": server.token,
            "BACKINTEL_TRIAL": trial_id,
        }
        return env

    def close(self) -> None:
        self.runner.close()
        if self._gateway is not None:
            self._gateway.close()
            self._gateway = None
        if self._gateway_dir is not None:
            shutil.rmtree(self._gateway_dir, ignore_errors=True)


def external_analyst(
    spec: str, config: AnalystConfig, *, unsandboxed: bool = False, cwd: Path | None = None
) -> ExternalAnalyst:
    """The `cmd:` analyst `spec` names (the agent's folder checked against `cwd`); with a
    model configured, its requests go through the run's model gateway, which, given
    `--model replay:DIR`, serves each trial's recorded exchanges instead (offline)."""
    command = parse_command(spec, cwd or Path.cwd())
    upstream, replay = None, None
    if config.model and config.model.startswith(REPLAY_PREFIX):
        try:
            replay = find_cassette_dir(Path(config.model.removeprefix(REPLAY_PREFIX)))
        except CassetteError as exc:
            raise AgentCommandError(f"--model {config.model!r}: {exc}") from exc
    elif config.model:
        try:
            upstream = Upstream.resolve(config.model, config.model_base_url)
        except GatewayConfigError as exc:
            raise AgentCommandError(f"--analyst {spec!r}: {exc}") from exc
    analyst = ExternalAnalyst(command, unsandboxed=unsandboxed, upstream=upstream, replay=replay)
    atexit.register(analyst.close)
    return analyst
