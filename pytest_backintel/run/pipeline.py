"""Concurrent trials in one pytest process (`--concurrency N`).

Model requests dominate a trial's wall time, so up to N trials run ahead of pytest in worker
threads: each provisions its own store and sandbox, runs the analyst, re-executes its evidence,
scores and tears down, exactly as a serial trial does. pytest still runs the items one by one
in their collected order; each item waits for its own prepared trial and reports it (record,
JUnit properties, HTML row, pass or fail), so every report and record comes out in the same
deterministic order as in a serial run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = [
    "AUTO_CONCURRENCY",
    "CALIBRATION_CONCURRENCY",
    "LOOKAHEAD",
    "UPCOMING",
    "Prepared",
    "TrialPipeline",
    "trials_in_flight",
]

K = TypeVar("K")
R = TypeVar("R")

AUTO_CONCURRENCY = 4
"""Trials in flight per process for a model analyst under `--concurrency auto` (the default):
model latency dominates, so a few run at once; custom and replay analysts run serially."""
CALIBRATION_CONCURRENCY = 2
"""Trials in flight for a built-in calibration analyst under `auto`, at most one per core, in a
process that is not an xdist worker (the workers already fill the cores): its trials are CPU
work split between the harness and its children (the engine's process, the sandbox), so while
one waits on a child the other uses the second core."""
LOOKAHEAD = 4
"""Prepared-but-unreported trials kept at most, as a multiple of N (bounds memory when one slow
trial holds up the reports behind it)."""
UPCOMING = 4 * LOOKAHEAD
"""How far ahead, as a multiple of N, the pipeline looks for trials it can start now: past the
ones that would only wait for a world another thread is building."""


def trials_in_flight(
    option: int | None, analyst_kind: str, max_connections: int | None = None, cores: int = 1
) -> int:
    """`--concurrency N`, or for `auto` (None) with a model analyst or an external agent (each
    its own process, waiting on its model) `AUTO_CONCURRENCY` (twice `--max-connections` when
    that is larger, so a request waits whenever one ends), with a calibration analyst
    `CALIBRATION_CONCURRENCY` on `cores` cores at most, else 1."""
    if option:
        return option
    if analyst_kind == "calibration":
        return max(1, min(CALIBRATION_CONCURRENCY, cores))
    if analyst_kind not in ("model", "external"):
        return 1
    return max(AUTO_CONCURRENCY, 2 * (max_connections or 0))


@dataclass
class Prepared(Generic[R]):
    """A trial run ahead: its result, or the exception that stopped it before it had one."""

    result: R | None = None
    error: BaseException | None = None


class TrialPipeline(Generic[K, R]):
    """Runs `prepare(key)` for up to `size` keys at once, ahead of the caller's order.

    `ensure_started(upcoming)` tops the window up from the keys the caller will ask for next,
    passing over those that would only wait (`waits_for`: a world another thread is building),
    with at most `lanes()` running (`size` by default; fewer while the machine's cores build a
    world); each trial that ends tops it up again. `take(key)` blocks until that key's trial is
    prepared (starting it now if it was not) and hands it over exactly once."""

    def __init__(
        self,
        size: int,
        prepare: Callable[[K], R],
        waits_for: Callable[[K], bool] = lambda _key: False,
        lanes: Callable[[], int] | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"concurrency must be at least 1, got {size}")
        self.size = size
        self._prepare, self._waits_for = prepare, waits_for
        self._lanes = lanes or (lambda: size)
        self._pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="backintel-trial")
        self._futures: dict[K, Future[Prepared[R]]] = {}
        self._taken: set[K] = set()
        self._upcoming: list[K] = []
        self._lock = threading.RLock()  # a done callback may run in the thread that holds it
        self._closed = False

    def _run(self, key: K) -> Prepared[R]:
        try:
            return Prepared(result=self._prepare(key))
        except BaseException as exc:  # handed to the item, which reports it in order
            return Prepared(error=exc)

    def _start(self, key: K) -> None:
        if key not in self._futures:
            future = self._futures[key] = self._pool.submit(self._run, key)
            future.add_done_callback(lambda _done: self.top_up())

    def ensure_started(self, upcoming: Iterable[K]) -> None:
        """Start trials for the next keys that need not wait, until `lanes()` run at once (or
        the lookahead is full); remember the keys for the top-ups as trials end."""
        with self._lock:
            self._upcoming = list(upcoming)
        self.top_up()

    def top_up(self) -> None:
        """Start what the last `ensure_started` keys allow now (a trial ended, a build did)."""
        with self._lock:
            if self._closed:
                return
            lanes = max(1, min(self.size, self._lanes()))
            for key in self._upcoming:
                running = sum(not f.done() for f in self._futures.values())
                if running >= lanes or len(self._futures) >= self.size * LOOKAHEAD:
                    break
                if key not in self._futures and key not in self._taken and not self._waits_for(key):
                    self._start(key)

    def take(self, key: K) -> Prepared[R]:
        """The prepared trial of `key` (waiting for it; starting it if nobody had)."""
        with self._lock:
            self._start(key)
            future = self._futures[key]
        prepared = future.result()
        with self._lock:
            del self._futures[key]
            self._taken.add(key)
        return prepared

    def pending(self) -> list[K]:
        """Keys started but not taken (trials an interrupted run leaves unreported)."""
        with self._lock:
            return list(self._futures)

    def close(self) -> None:
        """Cancel trials not yet started and wait for the running ones to clean up."""
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
