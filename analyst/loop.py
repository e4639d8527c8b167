"""One event loop per process for every agent run, however many trials run at once.

Pydantic AI's providers keep one HTTP client per process, and an asyncio client belongs to the
loop that first used it. Running each trial under its own `asyncio.run` would give every trial
a loop of its own (and a fresh thread pool for the sync tool calls): with trials in several
threads, the shared client then fails with "bound to a different event loop". So every agent
run is a task on this one loop, in a background thread, whichever thread asks for it, and it
runs in the asking thread's context (its trace span stays current).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["run_blocking"]

_T = TypeVar("_T")
_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _shared_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=_loop.run_forever, name="backintel-agent-loop", daemon=True
            )
            thread.start()
        return _loop


def run_blocking(make_coro: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run `make_coro()` to completion on the shared loop and wait for it from this thread
    (an interrupt while waiting cancels the task)."""
    loop = _shared_loop()
    done: concurrent.futures.Future[_T] = concurrent.futures.Future()
    tasks: list[asyncio.Task[_T]] = []

    def finished(task: asyncio.Task[_T]) -> None:
        if task.cancelled():
            done.cancel()
        elif (exc := task.exception()) is not None:
            done.set_exception(exc)
        else:
            done.set_result(task.result())

    def start() -> None:
        task = loop.create_task(make_coro())
        tasks.append(task)
        task.add_done_callback(finished)

    loop.call_soon_threadsafe(start, context=contextvars.copy_context())
    try:
        return done.result()
    except BaseException:
        if tasks and not done.done():
            loop.call_soon_threadsafe(tasks[0].cancel)
        raise
