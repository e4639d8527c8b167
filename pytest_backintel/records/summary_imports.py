"""The libraries a run's summary needs, imported while the run waits on its model.

`run_folder.records_summary` computes every rate's interval (`records.rates`): numpy, scipy's
t and normal quantiles and statsmodels' Wilson interval, some 1.5 s of CPU to import. Imported
there, at the session's end, they were most of the time between the last answer and the exit;
imported in a thread once the first model request has left, they load while the trials wait
on the model. The summary itself is computed at the end, as before, by the same functions.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable

__all__ = ["SUMMARY_MODULES", "BackgroundImports"]

SUMMARY_MODULES = (
    "pytest_backintel.records.rates",
    "scipy.stats",
    "statsmodels.stats.proportion",
)
"""What `records.rates` and `records.intervals` import, at module level or when computing."""


class BackgroundImports:
    """Import `modules` in a daemon thread once `after` returns (the session's wait for its
    first answered model request), unless cancelled first. A failed import is left for the
    code that needs the module to raise."""

    def __init__(
        self, modules: tuple[str, ...] = SUMMARY_MODULES, after: Callable[[], object] | None = None
    ) -> None:
        self.modules = modules
        self._after = after
        self._cancelled = threading.Event()
        self._thread = threading.Thread(target=self._load, name="backintel-imports", daemon=True)
        self._thread.start()

    def _load(self) -> None:
        if self._after is not None:
            self._after()
        for name in self.modules:
            if self._cancelled.is_set():
                return
            try:
                importlib.import_module(name)
            except Exception:  # the summary imports it again and reports the error
                return

    def cancel(self) -> None:
        """Import nothing more (a session that writes no summary)."""
        self._cancelled.set()

    def join(self, timeout_s: float | None = None) -> None:
        """Wait for the imports under way: one thread imports a module, never two at once."""
        self._thread.join(timeout_s)
