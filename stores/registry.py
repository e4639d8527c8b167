"""Backends by name: entry points in the `backintel.stores` group, closest-match errors."""

from __future__ import annotations

import difflib
from importlib.metadata import entry_points

from stores.base import Store

__all__ = ["UnknownStoreError", "available_stores", "load_store_class"]

GROUP = "backintel.stores"

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
