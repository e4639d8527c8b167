"""Sandboxes for the analyst's `run_python` tool and for re-running Python evidence.

Backends (`bwrap`, `docker`, `subprocess`) are chosen by name through `load_provider`; each is a
`SandboxProvider` set up once per session that opens one `Sandbox` per item. See docs/sandbox.md.
"""

from pytest_backintel.sandbox.base import (
    STORE_DIR,
    WORKSPACE,
    ExecResult,
    Sandbox,
    SandboxError,
    SandboxPathError,
    SandboxProvider,
    SandboxUnavailable,
)
from pytest_backintel.sandbox.cgroup import RunCgroup
from pytest_backintel.sandbox.limits import LimitHit, Limits

__all__ = [
    "STORE_DIR",
    "WORKSPACE",
    "ExecResult",
    "LimitHit",
    "Limits",
    "RunCgroup",
    "Sandbox",
    "SandboxError",
    "SandboxPathError",
    "SandboxProvider",
    "SandboxUnavailable",
]
