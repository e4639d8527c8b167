"""Generated worlds built once per process: by the first item that needs one, or ahead of it in
the background while the items that do not need it run.

`WorldBuilds.get(key, build)` returns the built value, building it in the calling thread when
nobody has started it and waiting for whoever has otherwise. `prefetch` starts one background
thread that builds the run's worlds, the longest build first (ties in the order the items first
need them), while the items run and build what they need first themselves: on two cores TPC-H
is built beside the Olist items instead of after them, and the first item that needs it waits
only for what is left. After each build the thread runs its follow-up (the world's data probes,
so the first trial that re-runs evidence finds them written). Builds across processes (xdist
workers) are shared by the worlds' own file locks. `building()` says what is being built and
for how long (the status line shows it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

import pytest

from pytest_backintel.collect.items import ScenarioItem
from pytest_backintel.collect.user_data import user_source

__all__ = ["Ahead", "WorldBuilds", "world_label", "worlds_wanted"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True)
class Ahead(Generic[K, V]):
    """A world to build ahead: its key, build and label, about how many seconds its build
    takes here (`cost`, 0 when built), and what to do once it is built (`then`)."""

    key: K
    build: Callable[[], V]
    label: str
    cost: Callable[[], float] = lambda: 0.0
    then: Callable[[], object] | None = None


def _cost(ahead: Ahead[Any, Any]) -> float:
    """`ahead.cost()`, or 0 when the world cannot say (it is then built in need order)."""
    try:
        return float(ahead.cost())
    except Exception:  # a world's own code: its build reports what is wrong
        return 0.0


class WorldBuilds(Generic[K, V]):
    """Each key built once, by whichever caller comes first; the others wait for it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._done: dict[K, Future[V]] = {}
        self._started: dict[K, tuple[str, float]] = {}
        self._ahead_busy = threading.Event()
        self.on_change: list[Callable[[], None]] = []
        """Called when a build starts or ends (trials that waited for it can start)."""

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

    def prefetch(self, wanted: Sequence[Ahead[K, V]]) -> threading.Thread:
        """Build each wanted world in turn in a background thread, the largest `cost` first,
        and run its `then` after it; a failure is left for the item that needs it to report."""

        def run() -> None:
            costs = [_cost(ahead) for ahead in wanted]
            order = sorted(range(len(wanted)), key=lambda i: -costs[i])  # stable: need order
            for ahead in (wanted[i] for i in order):
                self._ahead_busy.set()
                try:
                    self.get(ahead.key, ahead.build, ahead.label)
                    if ahead.then is not None:
                        ahead.then()
                except Exception:  # the item that needs the world reports the failure
                    continue
                finally:
                    self._ahead_busy.clear()
                    self._changed()

        thread = threading.Thread(target=run, name="backintel-worlds", daemon=True)
        thread.start()
        return thread

    def under_way(self, key: K) -> bool:
        """Somebody is building `key` now (a trial that needs it would only wait)."""
        with self._lock:
            return key in self._started

    def working_ahead(self) -> bool:
        """The background thread is building a world or its follow-up now (using a core)."""
        return self._ahead_busy.is_set()

    def building(self) -> list[tuple[str, float]]:
        """(label, seconds so far) of each build under way, oldest first."""
        now = self._clock()
        with self._lock:
            started = sorted(self._started.values(), key=lambda s: s[1])
        return [(label, now - began) for label, began in started]

    def _changed(self) -> None:
        for listener in list(self.on_change):
            listener()


def world_label(key: tuple[str, str]) -> str:
    """`world tpch (base)`: what the status line calls a build."""
    return f"world {key[0]} ({key[1]})"


def worlds_wanted(
    items: Iterable[pytest.Item],
    build: Callable[[Any], V],
    cost: Callable[[Any], float] | None = None,
    then: Callable[[Any], object] | None = None,
) -> list[Ahead[tuple[str, str], V]]:
    """The generated worlds the items need, in the order they first need them, each with its
    build, its `cost` and its follow-up `then` (each given the first scenario that needs the
    world); data of your own is bound in place, not built."""
    wanted: dict[tuple[str, str], Ahead[tuple[str, str], V]] = {}
    for item in items:
        if not isinstance(item, ScenarioItem) or user_source(item.scenario.dataset) is not None:
            continue
        key = (item.scenario.dataset.world, item.scenario.dataset.snapshot)
        if key not in wanted:
            scenario = item.scenario
            wanted[key] = Ahead(
                key,
                partial(build, scenario),
                world_label(key),
                partial(cost, scenario) if cost is not None else lambda: 0.0,
                partial(then, scenario) if then is not None else None,
            )
    return list(wanted.values())
