"""Generated worlds built once per process: by the first item that needs one, or ahead of it in
the background while the items that do not need it run.

`WorldBuilds.get(key, build)` returns the built value, building it in the calling thread when
nobody has started it and waiting for whoever has otherwise. `prefetch` starts one background
thread that builds the run's worlds in the order the items first need them, so the first item
that needs TPC-H waits only for what is left of its build. Builds across processes (xdist
workers) are shared by the worlds' own file locks. `building()` says what is being built and
for how long (the status line shows it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any, Generic, TypeVar

import pytest

from pytest_backintel.collect.items import ScenarioItem
from pytest_backintel.collect.user_data import user_source

__all__ = ["WorldBuilds", "world_label", "worlds_wanted"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class WorldBuilds(Generic[K, V]):
    """Each key built once, by whichever caller comes first; the others wait for it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._done: dict[K, Future[V]] = {}
        self._started: dict[K, tuple[str, float]] = {}
        self.on_change: Callable[[], None] | None = None
        """Called when a build starts or ends (the status line redraws)."""

    def get(self, key: K, build: Callable[[], V], label: str = "") -> V:
        """The value for `key`: built here if nobody started it, else waited for."""
        with self._lock:
            future = self._done.get(key)
            owner = future is None
            if future is None:
                future = self._done[key] = Future()
                self._started[key] = (label or str(key), self._clock())
        if owner:
            self._changed()
            try:
                future.set_result(build())
            except BaseException as exc:  # the waiting items see the same failure
                future.set_exception(exc)
            finally:
                with self._lock:
                    self._started.pop(key, None)
                self._changed()
        return future.result()

    def prefetch(self, wanted: Sequence[tuple[K, Callable[[], V], str]]) -> threading.Thread:
        """Build each (key, build, label) in turn in a background thread; a failure is left
        for the item that needs the world to report."""

        def run() -> None:
            for key, build, label in wanted:
                try:
                    self.get(key, build, label)
                except Exception:  # the item that needs the world reports the failure
                    continue

        thread = threading.Thread(target=run, name="backintel-worlds", daemon=True)
        thread.start()
        return thread

    def building(self) -> list[tuple[str, float]]:
        """(label, seconds so far) of each build under way, oldest first."""
        now = self._clock()
        with self._lock:
            started = sorted(self._started.values(), key=lambda s: s[1])
        return [(label, now - began) for label, began in started]

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()


def world_label(key: tuple[str, str]) -> str:
    """`world tpch (base)`: what the status line calls a build."""
    return f"world {key[0]} ({key[1]})"


def worlds_wanted(
    items: Iterable[pytest.Item], build: Callable[[Any], V]
) -> list[tuple[tuple[str, str], Callable[[], V], str]]:
    """The generated worlds the items need, in the order they first need them, each with its
    build (`build(scenario)`); data of your own is bound in place, not built."""
    wanted: dict[tuple[str, str], tuple[tuple[str, str], Callable[[], V], str]] = {}
    for item in items:
        if not isinstance(item, ScenarioItem) or user_source(item.scenario.dataset) is not None:
            continue
        key = (item.scenario.dataset.world, item.scenario.dataset.snapshot)
        if key not in wanted:
            wanted[key] = (key, partial(build, item.scenario), world_label(key))
    return list(wanted.values())
