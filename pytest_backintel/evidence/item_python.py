"""Python for one item: the analyst's `run_python` sandbox and the Python evidence runner.

The sandbox mounts the store's file or folder read-only when it has one, and gets a read-only
query channel (`pytest_backintel.evidence.query_channel`) whenever a session source is given:
so `backintel_store.query` works on every store, and is the only way to a server store
(PostgreSQL, ClickHouse, Iceberg on S3) that has nothing to mount.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pytest_backintel.analyst_api import InfraError
from pytest_backintel.evidence.query_channel import QueryChannel, SessionSource
from pytest_backintel.evidence.reexecute import EvidenceRunError
from pytest_backintel.sandbox import SandboxError
from pytest_backintel.sandbox.base import Sandbox, SandboxProvider
from pytest_backintel.sandbox.evidence import PythonEvidenceError, run_python_evidence
from pytest_backintel.sandbox.zygote import warm
from stores.base import StoreError

__all__ = ["ItemPython", "evidence_runner"]

PythonRunner = Callable[[str], Mapping[str, Any]]


class ItemPython:
    """The item's sandbox (opened on first use, closed with the item) and evidence re-runs,
    each in a fresh sandbox over the same store. A failing sandbox is an `InfraError`.

    `session` opens the session the sandbox's query channel runs statements through (the
    item's `ProvisionedStore.connect`, or a data probe's session); None: no channel, so a
    store without `mount` has no Python at all."""

    def __init__(
        self,
        provider: SandboxProvider,
        mount: Path | None,
        session: SessionSource | None = None,
    ) -> None:
        self.provider = provider
        self.mount = mount
        self.session = session
        self._sandbox: Sandbox | None = None
        self._channel: QueryChannel | None = None
        self.call_sql: list[list[str]] = []
        """Per `run` call, in order: the distinct statements it sent over the channel."""
        self.evidence_sql: list[list[str]] = []
        """Per evidence re-run: the distinct statements it sent over the channel."""

    def _open_channel(self) -> QueryChannel | None:
        if self.session is None or not _takes_channel(self.provider):
            return None
        return QueryChannel(
            self.session,
            parent=self.provider.session_dir,
            foreign_uid=self.provider.foreign_uid,
        )

    def run(self, code: str) -> str:
        """`run_python`: run `code` in the item's sandbox; its output, limits reported."""
        try:
            if self._sandbox is None:
                self._channel = self._open_channel()
                folder = self._channel.folder if self._channel is not None else None
                if folder is not None:
                    self._sandbox = self.provider.open(self.mount, channel=folder)
                else:
                    self._sandbox = self.provider.open(self.mount)
                warm(self.provider, self.provider.limits)  # Python evidence is likely to follow
            try:
                output = self._sandbox.exec(code).to_text()
            finally:
                channel = self._channel
                self.call_sql.append(channel.take_statements() if channel is not None else [])
        except SandboxError as exc:
            raise InfraError(f"the sandbox failed: {exc}") from exc
        except Exception as exc:  # the harness's own code failed, not the analyst's program
            raise InfraError.from_bug(exc, "run_python") from exc
        _raise_failure(self._channel)
        return output

    def evidence(self, code: str) -> Mapping[str, Any]:
        """Re-run Python evidence in a fresh sandbox (and a fresh channel session); the JSON
        object it printed."""
        try:
            channel = self._open_channel()
        except OSError as exc:
            raise InfraError(f"the query channel could not be opened: {exc}") from exc
        try:
            folder = channel.folder if channel is not None else None
            outcome = run_python_evidence(self.provider, self.mount, code, channel=folder)
        except SandboxError as exc:
            raise InfraError(f"the sandbox failed while re-running evidence: {exc}") from exc
        finally:
            if channel is not None:
                channel.close()
                self.evidence_sql.append(channel.take_statements())
        _raise_failure(channel)
        if isinstance(outcome, PythonEvidenceError):
            raise EvidenceRunError(f"{outcome.kind}: {outcome.reason}")
        return outcome.values

    def close(self) -> None:
        if self._sandbox is not None:
            sandbox, self._sandbox = self._sandbox, None
            sandbox.close()
        if self._channel is not None:
            channel, self._channel = self._channel, None
            channel.close()


def _takes_channel(provider: SandboxProvider) -> bool:
    """Whether `provider.open` mounts a query channel (a backend of before it does not)."""
    try:
        return "channel" in inspect.signature(provider.open).parameters
    except (TypeError, ValueError):
        return False


def _raise_failure(channel: QueryChannel | None) -> None:
    """The store (or the harness) failed behind a statement of the channel: infra_error."""
    failure = channel.failure if channel is not None else None
    if failure is None:
        return
    if isinstance(failure, StoreError):
        raise InfraError(f"the store failed behind the query channel: {failure}") from failure
    raise InfraError.from_bug(failure, "the query channel") from failure


def evidence_runner(
    provider: Callable[[], SandboxProvider],
) -> Callable[[Path | None, SessionSource | None], PythonRunner | None]:
    """(mount path, session source) -> the Python evidence runner over them (None when there
    is neither a mount nor a session); the provider is set up only when a runner is made."""

    def make(mount: Path | None, session: SessionSource | None = None) -> PythonRunner | None:
        if mount is None and session is None:
            return None
        return ItemPython(provider(), mount, session).evidence

    return make
