"""Fault injection for tests: `BACKINTEL_FAULT=<point>` makes the process SIGKILL itself there.

A test kills the harness at the exact instant it wants to prove safe (for example between
creating a PostgreSQL database and marking it), with no cooperation from the code after it.
"""

from __future__ import annotations

import os
import signal

__all__ = ["FAULT_ENV", "fault_point"]

FAULT_ENV = "BACKINTEL_FAULT"


def fault_point(name: str) -> None:
    """SIGKILL this process when `$BACKINTEL_FAULT` names this point; otherwise nothing."""
    if os.environ.get(FAULT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
