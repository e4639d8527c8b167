"""Python's garbage collector in a benchmark process.

A benchmark process holds a large heap that lives as long as the process: Pydantic AI, the
model provider's SDK, pytest's items, the scenarios. Every full collection rescans all of it:
now and then during the run, and three more times when the session ends (pytest looks for
unraisable exceptions, then the interpreter collects on its way out), which took 0.6 s at the
end of a 40-trial run. `freeze_after_collection` and `freeze_at_end` move what is alive after
collection, and again after the session, into the permanent generation (`gc.freeze`), so
those scans skip it. What the trials allocate is still collected as before.

`freeze_before_model` also freezes at the session's start, in a process that runs a model
analyst's trials: the imports of Pydantic AI and the model's SDK that follow allocate some
90,000 objects, and each full collection they trigger would rescan what pytest, its plugins
and BackIntel's modules left alive (some 60,000 more), CPU spent before the first model
request.

Only a session with benchmark items (or, at the start, one that runs a model's trials) does
this, and only the outermost BackIntel session in the process (an in-process `pytester` run
inside another session leaves the heap alone).
"""

from __future__ import annotations

import gc

__all__ = ["freeze_after_collection", "freeze_at_end", "freeze_before_model", "hold", "release"]

_sessions = 0
_frozen = False


def hold() -> None:
    """A BackIntel session starts in this process."""
    global _sessions
    _sessions += 1


def release() -> None:
    """A BackIntel session in this process has ended."""
    global _sessions, _frozen
    _sessions = max(0, _sessions - 1)
    _frozen = _frozen and _sessions > 0


def freeze_before_model(model_trials: bool) -> None:
    """Exempt what is alive at the session's start from the collections during the model's
    imports: only when this session runs a model analyst's trials and no other BackIntel
    session runs in this process."""
    if model_trials and _sessions == 1:
        gc.freeze()


def freeze_after_collection(benchmark_items: bool) -> None:
    """Exempt what collection left alive from later collections: only with benchmark items and
    no other BackIntel session running in this process."""
    global _frozen
    if benchmark_items and _sessions == 1:
        gc.freeze()
        _frozen = True


def freeze_at_end(records_merged: bool) -> None:
    """Once the session is over, exempt everything alive: if collection froze, or (an xdist
    controller, which collects nothing) it merged its workers' records."""
    if (_frozen or records_merged) and _sessions == 1:
        gc.freeze()
