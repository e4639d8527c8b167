"""Backends by name: entry points in the `backintel.stores` group, closest-match errors; the
store serving each kind of source of your own in place (`backintel.sources`); each backend's
sweep of what a killed run left on its server (`backintel.sweepers`); a dialect's rewrite of
translated check queries (`backintel.dialects`).

Nothing outside `stores/` imports a backend package: it asks this module, or a store's
interface (`stores.base`), so a backend is added by registering it, not by editing callers."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol

from stores.base import Store

__all__ = [
    "UnknownStoreError",
    "available_sources",
    "available_stores",
    "load_dialect_rewrite",
    "load_source_class",
    "load_store_class",
    "load_sweepers",
]

GROUP = "backintel.stores"
SOURCES = "backintel.sources"
SWEEPERS = "backintel.sweepers"
DIALECTS = "backintel.dialects"

_INSTALL_HINTS: dict[str, str] = {}
"""Backend name -> the command that installs its optional dependency."""


class UnknownStoreError(LookupError):
    """No backend of that name; the message lists the ones that exist."""


def available_stores() -> list[str]:
    return sorted(ep.name for ep in entry_points(group=GROUP))


def load_store_class(name: str) -> type[Store]:
    """The backend class registered as `name`, or an error naming the closest matches.

    `name` may carry options after the first ':' (`multi:postgres:a+sqlite:b`): the backend
    named before it must define `with_options(options) -> type[Store]`, which binds them."""
    name, _, options = name.partition(":")
    matches = [ep for ep in entry_points(group=GROUP) if ep.name == name]
    if not matches:
        known = available_stores()
        close = difflib.get_close_matches(name, known, n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise UnknownStoreError(
            f"unknown store backend {name!r}.{hint} Available: {', '.join(known) or 'none'}."
        )
    try:
        cls = matches[0].load()
    except ImportError as exc:
        hint = _INSTALL_HINTS.get(name, f"uv sync --extra {name}")
        raise UnknownStoreError(
            f"store backend {name!r} needs a package that is not installed ({exc.name}): "
            f"run `{hint}`."
        ) from exc
    if not (isinstance(cls, type) and issubclass(cls, Store)):
        raise UnknownStoreError(f"entry point {name!r} does not name a Store subclass: {cls!r}")
    if not options:
        return cls
    bind = getattr(cls, "with_options", None)
    if bind is None:
        raise UnknownStoreError(
            f"store backend {name!r} takes no options (got {options!r}); write just {name!r}"
        )
    bound: type[Store] = bind(options)
    return bound


def available_sources() -> list[str]:
    """The kinds of source of your own some store serves in place."""
    return sorted(ep.name for ep in entry_points(group=SOURCES))


def load_source_class(kind: str) -> type[Store]:
    """The store registered to serve a source of `kind` (`sqlite`, `duckdb`, `parquet`, `csv`,
    `postgres`, `clickhouse`) where it is."""
    matches = [ep for ep in entry_points(group=SOURCES) if ep.name == kind]
    if not matches:
        known = sorted(ep.name for ep in entry_points(group=SOURCES))
        raise UnknownStoreError(f"no store serves a {kind!r} source; known: {', '.join(known)}")
    cls = matches[0].load()
    if not (isinstance(cls, type) and issubclass(cls, Store)):
        raise UnknownStoreError(f"source entry point {kind!r} does not name a Store: {cls!r}")
    return cls


class Sweeper(Protocol):
    """A backend's sweep of what a killed run left on a server (see `backintel clean`)."""

    SOURCE_FILE: str
    """The marker a store serving a source in place keeps in its folder."""

    def sweep_folder(self, folder: Path, dry_run: bool) -> list[str] | None:
        """The databases dropped for the marker this backend left in `folder` (a stale store
        folder); None when `folder` holds no marker of this backend. Raises on failure."""

    def sweep_server(self, dry_run: bool) -> list[str]:
        """The databases and roles dropped on this backend's default server, if it has one."""


def load_sweepers() -> dict[str, Sweeper]:
    """Each registered backend's sweeper module, by name (sorted)."""
    return {ep.name: ep.load() for ep in sorted(entry_points(group=SWEEPERS), key=lambda e: e.name)}


def load_dialect_rewrite(dialect: str) -> Callable[[Any], Any] | None:
    """The backend's rewrite of a sqlglot tree translated into `dialect` (what sqlglot alone
    gets wrong there), or None when the dialect needs none."""
    for ep in entry_points(group=DIALECTS):
        if ep.name == dialect:
            rewrite: Callable[[Any], Any] = ep.load()
            return rewrite
    return None
