"""Python for one item: the analyst's `run_python` sandbox and the Python evidence runner."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pytest_backintel.analyst_api import InfraError
from pytest_backintel.evidence.reexecute import EvidenceRunError
from pytest_backintel.sandbox import SandboxError
from pytest_backintel.sandbox.base import Sandbox, SandboxProvider
from pytest_backintel.sandbox.evidence import PythonEvidenceError, run_python_evidence

__all__ = ["ItemPython", "evidence_runner"]


class ItemPython:
    """The item's sandbox (opened on first use, closed with the item) and evidence re-runs,
    each in a fresh sandbox over the same store. A failing sandbox is an `InfraError`."""

    def __init__(self, provider: SandboxProvider, mount: Path | None) -> None:
        self.provider = provider
        self.mount = mount
        self._sandbox: Sandbox | None = None

    def run(self, code: str) -> str:
        """`run_python`: run `code` in the item's sandbox; its output, limits reported."""
        try:
            if self._sandbox is None:
                self._sandbox = self.provider.open(self.mount)
            return self._sandbox.exec(code).to_text()
        except SandboxError as exc:
            raise InfraError(f"the sandbox failed: {exc}") from exc
        except Exception as exc:  # the harness's own code failed, not the analyst's program
            raise InfraError.from_bug(exc, "run_python") from exc

    def evidence(self, code: str) -> Mapping[str, Any]:
        """Re-run Python evidence in a fresh sandbox; the JSON object it printed."""
        try:
            outcome = run_python_evidence(self.provider, self.mount, code)
        except SandboxError as exc:
            raise InfraError(f"the sandbox failed while re-running evidence: {exc}") from exc
        if isinstance(outcome, PythonEvidenceError):
            raise EvidenceRunError(f"{outcome.kind}: {outcome.reason}")
        return outcome.values

    def close(self) -> None:
        if self._sandbox is not None:
            sandbox, self._sandbox = self._sandbox, None
            sandbox.close()


def evidence_runner(
    provider: Callable[[], SandboxProvider],
) -> Callable[[Path | None], Callable[[str], Mapping[str, Any]] | None]:
    """Mount path -> the Python evidence runner over it (None when nothing can be mounted);
    the provider is set up only when a runner is first made."""

    def make(mount: Path | None) -> Callable[[str], Mapping[str, Any]] | None:
        return ItemPython(provider(), mount).evidence if mount is not None else None

    return make
