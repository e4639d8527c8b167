"""Processes that outlive the call that starts them (the sandbox's zygote, a local S3 server)
are started by one thread that lives as long as the harness process.

`PR_SET_PDEATHSIG` (bwrap's `--die-with-parent`, a server's own death signal) is sent when the
*thread* that forked the process ends, not when its process does. A zygote started by a
short-lived thread (`zygote.warm`'s, a probe build's, a trial pool's worker) was killed
(SIGKILL) as that thread ended, with the run it was serving at that moment, which then had no
report of its end. Started here, a process still dies with the harness process, whose last
thread this one is.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["start_lasting"]

T = TypeVar("T")
_Job = tuple[Callable[[], Any], "Future[Any]"]


class _StarterThread:
    """A daemon thread that runs the start-ups it is given, one at a time, and never ends."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        thread = threading.Thread(target=self._serve, name="backintel-lasting-start", daemon=True)
        thread.start()

    def _serve(self) -> None:
        while True:
            start, future = self.jobs.get()
            try:
                future.set_result(start())
            except BaseException as exc:  # handed to the caller
                future.set_exception(exc)


_starter: _StarterThread | None = None
_made = threading.Lock()


def start_lasting(start: Callable[[], T]) -> T:
    """`start()` run in the thread that lives as long as this process (a process it forks is
    not killed when the caller's thread ends); its result, or its exception raised here."""
    global _starter
    with _made:
        if _starter is None or _starter.pid != os.getpid():  # none yet, or a forked copy
            _starter = _StarterThread()
        starter = _starter
    future: Future[T] = Future()
    starter.jobs.put((start, future))
    return future.result()
