"""An xdist worker dies with its controller.

Killed with SIGKILL, a controller cannot tell its workers to stop; left alone, each goes on
until execnet notices the closed channel and interrupts it, seconds later and part-way through
whatever it was doing (a half-dropped database, a role without its database). The next run's
start, meanwhile, sees their owners alive and keeps what they made. Asking the kernel to send
the worker SIGKILL when its parent dies (`PR_SET_PDEATHSIG`) makes a killed controller a killed
run: every owner is gone at once, and the next run's start (or `backintel clean`) removes what
they left (`pytest_backintel.run.cleanup`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

__all__ = ["die_with_controller"]

_PR_SET_PDEATHSIG = 1


def die_with_controller() -> None:
    """In an xdist worker (Linux): SIGKILL when the controller process ends."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if parent == 1 or not os.path.exists(f"/proc/{parent}"):  # it died before we asked
            os.kill(os.getpid(), signal.SIGKILL)
