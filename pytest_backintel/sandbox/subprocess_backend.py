"""The subprocess backend: rlimits only, no isolation. Unsafe; for machines without bwrap.

The payload runs as the harness's user on the host file system with the network reachable. Only
the environment is cleared, the working directory is the item's workspace, and the same limits
apply (a pids cgroup caps processes where one is writable, else RLIMIT_NPROC).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from pytest_backintel.sandbox._process import run_confined
from pytest_backintel.sandbox._shipped import (
    launcher_spec,
    python_paths,
    sandbox_env,
    write_shipped,
)
from pytest_backintel.sandbox.base import (
    CHANNEL_SOCKET,
    ExecResult,
    ProviderSandbox,
    SandboxProvider,
)
from pytest_backintel.sandbox.cgroup import RunCgroup
from pytest_backintel.sandbox.limits import Limits

__all__ = ["UNSAFE_WARNING", "SubprocessProvider", "SubprocessSandbox"]

UNSAFE_WARNING = (
    "sandbox 'subprocess' is UNSAFE: analyst Python runs on the host with only rlimits "
    "(no file-system or network isolation; the store is not write-protected beyond its file "
    "permissions). Use it only for trusted analysts or where bwrap and docker are unavailable."
)


class SubprocessSandbox(ProviderSandbox):
    """The store, workspace and query channel are seen at their host paths."""

    @property
    def store_path(self) -> str | None:
        return None if self._store is None else str(self._store)

    @property
    def query_path(self) -> str | None:
        return None if self._channel is None else str(self._channel / CHANNEL_SOCKET)

    @property
    def workspace_inside(self) -> str:
        return str(self.workspace)


class SubprocessProvider(SandboxProvider):
    """Host subprocesses under rlimits; `unsafe` is True and `warning` must be shown."""

    name: ClassVar[str] = "subprocess"
    unsafe: ClassVar[bool] = True
    warning: ClassVar[str | None] = UNSAFE_WARNING

    def _check_available(self) -> None:
        self._base, _, self._site = python_paths()
        # The harness's own (venv) interpreter: it does not load the base install's .pth files.
        self._interpreter = Path(sys.executable)
        self._shipped = write_shipped(self.session_dir / "shipped", self._interpreter)
        self.cgroup_mode = RunCgroup.usable()

    def open(
        self, store_mount: Path | None, workdir: Path | None = None, channel: Path | None = None
    ) -> SubprocessSandbox:
        store, channel = self._mount(store_mount), self._channel(channel)
        return SubprocessSandbox(self, self._new_workspace(workdir), store, self.limits, channel)

    def run(
        self,
        cmd: str | Sequence[str],
        *,
        workspace: Path,
        store: Path | None,
        limits: Limits,
        channel: Path | None = None,
    ) -> ExecResult:
        tmp = workspace / ".tmp"
        tmp.mkdir(exist_ok=True)
        env = sandbox_env(
            limits,
            store=None if store is None else str(store),
            workspace=str(workspace),
            tmp=str(tmp),
            lib=str(self._shipped / "lib"),
            site=str(self._site),
            path=f"{self._shipped / 'bin'}:/usr/bin:/bin",
            query=None if channel is None else str(channel / CHANNEL_SOCKET),
        )
        read_fd, write_fd = os.pipe()
        spec = launcher_spec(
            limits,
            nproc=not self.cgroup_mode,
            python=self._interpreter,
            status=f"/dev/fd/{write_fd}",
            argv=() if isinstance(cmd, str) else cmd,
        )
        launcher = str(self._shipped / "lib" / "_launcher.py")
        argv = [str(self._interpreter), "-I", "-S", launcher, json.dumps(spec)]
        return run_confined(
            argv,
            code=cmd if isinstance(cmd, str) else None,
            limits=limits,
            env=env,
            cwd=workspace,
            status_fd=write_fd,
            status_read=read_fd,
            cgroup_mode=self.cgroup_mode,
            writable=(workspace,),
        )
