"""Sandbox backends by name: the built-in three plus entry points in `backintel.sandboxes`."""

from __future__ import annotations

import difflib
import importlib
import sys
from importlib.metadata import entry_points
from pathlib import Path

from pytest_backintel.sandbox.base import SandboxProvider
from pytest_backintel.sandbox.limits import Limits

__all__ = [
    "GROUP",
    "UnknownSandboxError",
    "available_sandboxes",
    "create_provider",
    "default_sandbox",
    "load_provider_class",
]

GROUP = "backintel.sandboxes"

_BUILTIN: dict[str, str] = {
    "bwrap": "pytest_backintel.sandbox.bwrap:BwrapProvider",
    "docker": "pytest_backintel.sandbox.docker_backend:DockerProvider",
    "subprocess": "pytest_backintel.sandbox.subprocess_backend:SubprocessProvider",
}


class UnknownSandboxError(LookupError):
    """No sandbox backend of that name; the message lists the ones that exist."""


def available_sandboxes() -> list[str]:
    return sorted({*_BUILTIN, *(ep.name for ep in entry_points(group=GROUP))})


def default_sandbox() -> str:
    """`bwrap` on Linux, `docker` elsewhere; `subprocess` is never chosen implicitly."""
    return "bwrap" if sys.platform.startswith("linux") else "docker"


def load_provider_class(name: str) -> type[SandboxProvider]:
    """The provider class registered as `name`, or an error naming the closest matches."""
    if name in _BUILTIN:
        module, _, attr = _BUILTIN[name].partition(":")
        cls = getattr(importlib.import_module(module), attr)
    else:
        matches = [ep for ep in entry_points(group=GROUP) if ep.name == name]
        if not matches:
            known = available_sandboxes()
            close = difflib.get_close_matches(name, known, n=3)
            hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise UnknownSandboxError(
                f"unknown sandbox backend {name!r}.{hint} Available: {', '.join(known)}."
            )
        cls = matches[0].load()
    if not (isinstance(cls, type) and issubclass(cls, SandboxProvider)):
        raise UnknownSandboxError(f"sandbox {name!r} is not a SandboxProvider subclass: {cls!r}")
    return cls


def create_provider(
    name: str | None = None, workdir: Path | None = None, *, limits: Limits | None = None
) -> SandboxProvider:
    """An instance of backend `name` (default: `default_sandbox()`); call setup_session next."""
    return load_provider_class(name or default_sandbox())(workdir, limits=limits)
