"""The external agent's process: in a bubblewrap sandbox (the default) or, only when asked
with --analyst-unsandboxed, as a plain child process (then the run is labelled unsafe).

Inside the sandbox the agent sees a read-only root without the project, its own folder
read-only at AGENT_DIR, a private writable home (/workspace), and no network but the
forwarder's loopback ports to its trial's MCP server (and the model gateway), whose Unix
sockets are the only things of the host mounted for it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from pytest_backintel.run.external.command import AGENT_DIR, AgentCommand
from pytest_backintel.sandbox.base import ExecResult, SandboxError
from pytest_backintel.sandbox.bwrap import BwrapProvider
from pytest_backintel.sandbox.limits import LimitHit, Limits
from pytest_backintel.sandbox.registry import create_provider

__all__ = [
    "ENDPOINTS_INSIDE",
    "FORWARD_INSIDE",
    "GATEWAY_PORT",
    "MCP_PORT",
    "AgentRunner",
]

MCP_PORT = 8931
"""The MCP server's port on the sandbox's own loopback."""
GATEWAY_PORT = 8932
"""The model gateway's port on the sandbox's own loopback."""
ENDPOINTS_INSIDE = "/run/backintel-agent"
"""The trial's socket folder inside the sandbox (read-only)."""
FORWARD_INSIDE = "/opt/backintel/agent/forward.py"
_FORWARD = Path(__file__).with_name("_forward.py")
_HOST_ENV_KEPT = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")


class AgentRunner:
    """Starts one trial's agent and waits for it; one per process, shared by trials."""

    def __init__(self, *, unsandboxed: bool, workdir: Path | None = None) -> None:
        self.unsandboxed = unsandboxed
        self._workdir = workdir
        self._provider: BwrapProvider | None = None
        self._lock = threading.Lock()

    def _bwrap(self) -> BwrapProvider:
        with self._lock:
            if self._provider is None:
                provider = create_provider("bwrap", self._workdir)
                assert isinstance(provider, BwrapProvider)
                provider.setup_session()
                self._provider = provider
            return self._provider

    def run(
        self,
        command: AgentCommand,
        env: dict[str, str],
        sockets: dict[int, Path],
        limits: Limits,
        home: Path,
    ) -> ExecResult:
        """Run the agent to its end or its wall-time limit; `sockets` maps a loopback port
        inside the sandbox to the host socket it forwards to."""
        if self.unsandboxed:
            return _run_plain(command.argv, env, limits, home)
        provider = self._bwrap()
        mounts = ["--ro-bind", str(_FORWARD), FORWARD_INSIDE]
        if command.folder is not None:
            mounts += ["--ro-bind", str(command.folder), AGENT_DIR]
        folders = {path.parent for path in sockets.values()}
        inside: list[list[object]] = []
        for index, folder in enumerate(sorted(folders)):
            target = f"{ENDPOINTS_INSIDE}/{index}"
            mounts += ["--ro-bind", str(folder), target]
            for port, path in sockets.items():
                if path.parent == folder:
                    inside.append([port, f"{target}/{path.name}"])
        forward = ["python", "-I", "-S", FORWARD_INSIDE]  # no site: a fast start
        payload = [*forward, json.dumps(inside), "--", *command.argv_inside]
        return provider.run(
            payload, workspace=home, store=None, limits=limits, mounts=mounts, env=env
        )

    def close(self) -> None:
        if self._provider is not None:
            self._provider.teardown_session()
            self._provider = None


def _run_plain(argv: list[str], env: dict[str, str], limits: Limits, home: Path) -> ExecResult:
    """The agent as a plain child (unsafe): the host's PATH and Python, nothing else of its
    environment; killed with its process group at the wall-time limit."""
    full = {k: v for k, v in os.environ.items() if k in _HOST_ENV_KEPT}
    full.update(env, HOME=str(home))
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                argv, env=full, cwd=home, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            raise SandboxError(f"cannot start the agent {argv[0]!r}: {exc}") from exc
        hit: LimitHit | None = None
        try:
            proc.wait(timeout=limits.wall_time_s)
        except subprocess.TimeoutExpired:
            hit = "wall_time"
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        stdout, stderr = (_read(f, limits.max_output_bytes) for f in (out, err))
    return ExecResult(
        returncode=proc.returncode,
        stdout=stdout[0],
        stderr=stderr[0],
        stdout_truncated=stdout[1],
        stderr_truncated=stderr[1],
        limit_hit=hit,
        duration_s=round(time.perf_counter() - started, 4),
        limit=limits.describe(hit) if hit else None,
    )


def _read(handle: object, limit: int) -> tuple[str, bool]:
    assert hasattr(handle, "seek")
    assert hasattr(handle, "read")
    handle.seek(0)
    data: bytes = handle.read()
    cut = data[-limit:] if len(data) > limit else data
    return cut.decode("utf-8", "replace"), len(data) > limit
