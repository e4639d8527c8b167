"""Long-lived threads that run custom analysts' `answer()` under a wall-clock limit.

A custom analyst is synchronous and untrusted: it runs in a daemon thread that the trial
waits for at most `--analyst-timeout`, so a hung one is abandoned and the run goes on. A new
thread per trial would cost the analyst more than the thread: Pydantic AI's `run_sync` keeps
an event loop per thread (and the executor its sync tools and function models run in), so a
fresh thread builds both again on every trial. Threads are therefore kept and reused; one
whose call overran is never reused (it may still be running the hung call).
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["WatchdogTimeout", "run_with_limit"]


class WatchdogTimeout(Exception):
    """The call did not return within its limit; its thread was abandoned."""


class _Worker:
    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="backintel-analyst", daemon=True).start()

    def _serve(self) -> None:
        while True:
            self._jobs.get()()

    def call(self, fn: Callable[[], Any], timeout_s: float) -> Any:
        """`fn()` in this worker's thread, in a copy of the caller's context."""
        done = threading.Event()
        outcome: dict[str, Any] = {}
        context = contextvars.copy_context()

        def job() -> None:
            try:
                outcome["value"] = context.run(fn)
            except BaseException as exc:  # handed to the caller below
                outcome["error"] = exc
            finally:
                done.set()

        self._jobs.put(job)
        if not done.wait(timeout_s):
            raise WatchdogTimeout
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]


_idle: list[_Worker] = []
_lock = threading.Lock()


def run_with_limit(fn: Callable[[], Any], timeout_s: float) -> Any:
    """`fn()` in a kept daemon thread (one per call in flight); `WatchdogTimeout` when it
    has not returned after `timeout_s` seconds, and its thread is not kept."""
    with _lock:
        worker = _idle.pop() if _idle else None
    worker = worker if worker is not None else _Worker()
    kept = True
    try:
        return worker.call(fn, timeout_s)
    except WatchdogTimeout:
        kept = False
        raise
    finally:
        if kept:
            with _lock:
                _idle.append(worker)
