"""Worlds (generated or loaded datasets) as the harness sees them: a small public interface,
registered through the `backintel.worlds` entry-point group.

The shipped benchmark registers its worlds (the Olist-shaped world, its split and replay
snapshots, TPC-H, the acceptance worlds) in that group exactly as a user's package would; the
harness never imports them by module path.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pytest_backintel.scenario import Scenario
from stores.base import DatasetFiles

__all__ = [
    "DATA_DIR_ENV",
    "GROUP",
    "UnknownWorldError",
    "World",
    "available_worlds",
    "data_dir",
    "get_world",
]

GROUP = "backintel.worlds"
DATA_DIR_ENV = "BACKINTEL_DATA_DIR"


class UnknownWorldError(LookupError):
    """No world of that name; the message lists the registered ones."""


@runtime_checkable
class World(Protocol):
    """What the harness needs of a world; `scenarios.worlds.World` is one implementation."""

    name: str

    def ensure_built(self, data_dir: Path, snapshot: str = "base") -> DatasetFiles:
        """The snapshot's files, built first if absent (safe under concurrent workers)."""

    def data_hash(self, files: DatasetFiles) -> str:
        """A hash of the data's logical content, recorded with every trial."""

    def verify(self, data_dir: Path, snapshot: str = "base") -> list[str]:
        """What differs from the world's pinned files (empty: nothing, or nothing pinned)."""

    def reference(
        self, scenario: Scenario, files: DatasetFiles, data_hash: str
    ) -> Mapping[str, Any]:
        """The evaluator's reference values of `scenario` on these files. The harness calls it
        only after the analyst has answered."""


def data_dir(root: Path) -> Path:
    """Where worlds build their data: `$BACKINTEL_DATA_DIR`, else `<rootdir>/data`."""
    raw = os.environ.get(DATA_DIR_ENV, "").strip()
    return Path(raw).expanduser().resolve() if raw else root / "data"


@cache
def _registered() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name)}


def available_worlds() -> list[str]:
    return sorted(_registered())


def get_world_entry(name: str) -> EntryPoint:
    """The entry point registering world `name`, or an error naming the closest names."""
    ep = _registered().get(name)
    if ep is None:
        close = difflib.get_close_matches(name, available_worlds(), n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise UnknownWorldError(
            f"unknown world {name!r}.{hint} Registered worlds ({GROUP} entry points): "
            f"{', '.join(available_worlds()) or 'none'}."
        )
    return ep


def get_world(name: str) -> World:
    """The registered world `name`, built by its factory (config from the environment)."""
    ep = get_world_entry(name)
    factory: Callable[[], Any] = ep.load()
    world = factory()
    if not isinstance(world, World):
        raise UnknownWorldError(
            f"entry point {name!r} ({ep.value}) returned {type(world).__name__}, which lacks "
            "the World interface (name, ensure_built, data_hash, verify, reference)"
        )
    return world
