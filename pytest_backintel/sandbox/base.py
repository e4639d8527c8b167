"""The sandbox interface: a provider per session, a sandbox per item, results as values.

Modelled on inspect_ai's `SandboxEnvironment`: `exec`, `read_file`, `write_file` and lifecycle
methods. What the payload does (a non-zero exit, a limit hit, truncated output) comes back as an
`ExecResult`, never as an exception; only the sandbox itself failing raises `SandboxError` (the
harness scores that as infra_error), and a caller's mistake raises `ValueError`.
"""

from __future__ import annotations

import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, Protocol, Self

from pytest_backintel.sandbox.bytecode import warm_in_background
from pytest_backintel.sandbox.limits import LimitHit, Limits
from pytest_backintel.sandbox.seed import SANDBOX_SEED
from stores.owner import mark_folder

__all__ = [
    "CHANNEL_DIR",
    "CHANNEL_SOCKET",
    "STORE_DIR",
    "WORKSPACE",
    "ExecResult",
    "ProviderSandbox",
    "Sandbox",
    "SandboxError",
    "SandboxPathError",
    "SandboxProvider",
    "SandboxUnavailable",
    "channel_inside",
    "store_inside",
]

WORKSPACE = "/workspace"
"""Where the item's workspace appears inside an isolating sandbox (bwrap, docker)."""
STORE_DIR = "/data/store"
"""The store is mounted read-only at STORE_DIR/<its file or folder name>."""

CHANNEL_DIR = "/run/backintel-query"
"""Where an isolating sandbox mounts the folder of the item's query channel, read-only."""
CHANNEL_SOCKET = "query.sock"
"""The channel's Unix socket in its folder (also in $BACKINTEL_QUERY)."""

_MAX_READ = 16 * 1024 * 1024


def store_inside(store: Path | None) -> str | None:
    """Where an isolating sandbox mounts `store`: STORE_DIR/<its name> (None: no store)."""
    return None if store is None else f"{STORE_DIR}/{store.name}"


def channel_inside(channel: Path | None) -> str | None:
    """The query channel's socket as an isolating sandbox sees it (None: no channel)."""
    return None if channel is None else f"{CHANNEL_DIR}/{CHANNEL_SOCKET}"


class SandboxError(Exception):
    """The sandbox itself failed (could not start, could not clean up): not the payload's fault."""


class SandboxUnavailable(SandboxError):
    """The backend cannot run on this machine; the message says what is missing and the fix."""


class SandboxPathError(ValueError):
    """A read_file/write_file path outside the workspace."""


@dataclass(frozen=True)
class ExecResult:
    """How one execution ended. `limit_hit` names the limit that stopped or broke it."""

    returncode: int
    """The payload's exit code; a negative number is the signal that killed it."""
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    limit_hit: LimitHit | None
    duration_s: float
    limit: str | None = None
    """The limit that was hit, with its value (`Limits.describe`), or None."""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.limit_hit is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_text(self) -> str:
        """A rendering for a model to read: output, then any error, limit or truncation."""
        parts = [self.stdout.rstrip("\n")] if self.stdout else []
        if self.stderr:
            parts.append("[stderr]\n" + self.stderr.rstrip("\n"))
        if self.limit_hit is not None:
            value = f" ({self.limit})" if self.limit else ""
            parts.append(f"[stopped: {self.limit_hit} limit reached{value}]")
        elif self.returncode != 0:
            parts.append(f"[exit code {self.returncode}]")
        if not parts:
            parts.append("[no output]")
        return "\n".join(parts)


class Sandbox(ABC):
    """One item's sandbox: a private workspace that persists across `exec` calls until `close`."""

    def __init__(self, workspace: Path, limits: Limits) -> None:
        self.workspace = workspace
        """The host folder behind the workspace (removed by `close`)."""
        self.limits = limits
        self._closed = False

    @property
    @abstractmethod
    def store_path(self) -> str | None:
        """The store's path as code inside the sandbox sees it (also in $BACKINTEL_STORE)."""

    @property
    def query_path(self) -> str | None:
        """The query channel's socket as code inside sees it (also in $BACKINTEL_QUERY)."""
        return None

    @abstractmethod
    def _exec(self, cmd: str | Sequence[str], limits: Limits) -> ExecResult: ...

    def exec(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        """Run Python code (a string) or a command (argv list) in the workspace.

        `timeout` overrides the wall-time limit for this call. Returns an `ExecResult` whatever
        the payload does; raises `SandboxError` only when the sandbox cannot run it.
        """
        if self._closed:
            raise SandboxError("this sandbox is closed; open a new one from the provider")
        if not isinstance(cmd, str) and (not cmd or not all(isinstance(a, str) for a in cmd)):
            raise ValueError(f"exec needs Python code (str) or a non-empty argv list, got {cmd!r}")
        chosen = limits or self.limits
        if timeout is not None:
            chosen = chosen.with_(wall_time_s=timeout)
        return self._exec(cmd, chosen)

    def _host_path(self, path: str) -> Path:
        """The host path of a workspace path (relative, or absolute under /workspace)."""
        pure = PurePosixPath(path)
        if pure.is_absolute():
            try:
                pure = pure.relative_to(self.workspace_inside)
            except ValueError:
                raise SandboxPathError(
                    f"{path!r} is outside the workspace; use a relative path or one under "
                    f"{self.workspace_inside}"
                ) from None
        if ".." in pure.parts or not pure.parts:
            raise SandboxPathError(f"{path!r}: '..' and empty paths are not allowed")
        root = self.workspace.resolve()
        target = (root / pure).resolve()  # follows symlinks the payload may have planted
        if not target.is_relative_to(root):
            raise SandboxPathError(f"{path!r} resolves outside the workspace ({target})")
        return target

    @property
    def workspace_inside(self) -> str:
        """The workspace path as code inside sees it."""
        return WORKSPACE

    def read_file(self, path: str, *, max_bytes: int = _MAX_READ) -> bytes:
        """A file from the workspace; `SandboxPathError` outside it, `FileNotFoundError`."""
        target = self._host_path(path)
        with target.open("rb") as fh:
            data = fh.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise ValueError(f"{path!r} is larger than {max_bytes} bytes")
        return data

    def write_file(self, path: str, contents: str | bytes) -> None:
        """Write a file into the workspace (parents created)."""
        target = self._host_path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = contents.encode("utf-8") if isinstance(contents, str) else contents
        target.write_bytes(data)

    def close(self) -> None:
        """Remove the workspace; safe to call twice."""
        self._closed = True
        shutil.rmtree(self.workspace, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SandboxRunner(Protocol):
    """What a `ProviderSandbox` runs through: one execution over a workspace and a store."""

    def run(
        self,
        cmd: str | Sequence[str],
        *,
        workspace: Path,
        store: Path | None,
        limits: Limits,
        channel: Path | None = None,
    ) -> ExecResult: ...


class ProviderSandbox(Sandbox):
    """A sandbox whose every `exec` is one `provider.run` over the same workspace and store
    (and query channel, when it has one)."""

    def __init__(
        self,
        provider: SandboxRunner,
        workspace: Path,
        store: Path | None,
        limits: Limits,
        channel: Path | None = None,
    ) -> None:
        super().__init__(workspace, limits)
        self._provider = provider
        self._store = store
        self._channel = channel

    @property
    def store_path(self) -> str | None:
        return store_inside(self._store)

    @property
    def query_path(self) -> str | None:
        """The query channel's socket as code inside sees it (also in $BACKINTEL_QUERY)."""
        return channel_inside(self._channel)

    def _exec(self, cmd: str | Sequence[str], limits: Limits) -> ExecResult:
        if self._channel is None:  # a provider of before the channel takes no `channel`
            return self._provider.run(
                cmd, workspace=self.workspace, store=self._store, limits=limits
            )
        return self._provider.run(
            cmd, workspace=self.workspace, store=self._store, limits=limits, channel=self._channel
        )


class SandboxProvider(ABC):
    """A backend, set up once per session, opening one `Sandbox` per item."""

    name: ClassVar[str]
    unsafe: ClassVar[bool] = False
    """True when the backend does not isolate the file system or the network."""
    warning: ClassVar[str | None] = None
    """Text the harness prints in the pytest header and records in run.json when set."""
    foreign_uid: ClassVar[bool] = False
    """True when code inside runs as a host uid other than the harness's (docker), so a query
    channel's socket must be connectable by any uid."""

    def __init__(self, workdir: Path | None = None, *, limits: Limits | None = None) -> None:
        self.workdir = workdir
        self.limits = limits or Limits()
        self._session_dir: Path | None = None

    @property
    def session_dir(self) -> Path:
        if self._session_dir is None:
            raise SandboxError(f"sandbox provider {self.name!r}: call setup_session() first")
        return self._session_dir

    def setup_session(self) -> None:
        """Once per session (per xdist worker): check the backend can run, prepare files."""
        if self.workdir is not None:
            self.workdir.mkdir(parents=True, exist_ok=True)
        self._session_dir = Path(tempfile.mkdtemp(prefix="backintel-sbx-", dir=self.workdir))
        mark_folder(self._session_dir)  # found and removed after a crash (cleanup.py)
        self._check_available()
        warm_in_background()  # the stack's bytecode, which a sandbox cannot write

    def teardown_session(self) -> None:
        """Once per session: remove what setup_session made; safe to call twice."""
        if self._session_dir is not None:
            shutil.rmtree(self._session_dir, ignore_errors=True)
            self._session_dir = None

    @abstractmethod
    def _check_available(self) -> None:
        """Raise `SandboxUnavailable` saying what is missing."""

    @abstractmethod
    def open(
        self, store_mount: Path | None, workdir: Path | None = None, channel: Path | None = None
    ) -> Sandbox:
        """A fresh sandbox for one item with only `store_mount` mounted, read-only.

        The workspace is a new folder under `workdir` (default: the session folder), removed when
        the sandbox closes. `channel` is the host folder of the item's query channel
        (`CHANNEL_SOCKET` in it), mounted read-only at `CHANNEL_DIR`; its socket's path inside
        is $BACKINTEL_QUERY.
        """

    def _mount(self, store_mount: Path | None) -> Path | None:
        """`store_mount` resolved; raises before setup_session or when it does not exist."""
        self.session_dir  # noqa: B018 - raises when setup_session was not called
        if store_mount is not None and not store_mount.exists():
            raise SandboxError(f"store to mount does not exist: {store_mount}")
        return store_mount.resolve() if store_mount is not None else None

    def _channel(self, channel: Path | None) -> Path | None:
        """`channel` resolved; raises when its socket does not exist."""
        if channel is not None and not (channel / CHANNEL_SOCKET).exists():
            raise SandboxError(f"query channel to mount has no socket: {channel}")
        return channel.resolve() if channel is not None else None

    def _new_workspace(self, workdir: Path | None) -> Path:
        parent = workdir if workdir is not None else self.session_dir
        parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="ws-", dir=parent))

    def describe(self) -> dict[str, Any]:
        """What run.json records about the sandbox."""
        return {
            "backend": self.name,
            "unsafe": self.unsafe,
            "warning": self.warning,
            "limits": asdict(self.limits),
            "seed": SANDBOX_SEED,
        }

    def __enter__(self) -> Self:
        self.setup_session()
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown_session()
