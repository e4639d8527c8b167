"""Sandboxes for the analyst's `run_python` tool and for re-running Python evidence.

Backends (`bwrap`, `docker`, `subprocess`) are chosen by name through `load_provider`; each is a
`SandboxProvider` set up once per session that opens one `Sandbox` per item, with the item's
store mounted read-only when it lives on disk and the folder of its read-only query channel
(served by `pytest_backintel.evidence.query_channel`) mounted at `CHANNEL_DIR`. See
docs/sandbox.md.
"""

from pytest_backintel.sandbox.base import (
    CHANNEL_DIR,
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
    "CHANNEL_DIR",
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
