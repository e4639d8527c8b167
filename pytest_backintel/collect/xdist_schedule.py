"""xdist's `load` scheduling, keeping each worker as many items ahead as it runs trials at once.

With `--concurrency N` a worker runs up to N trials of the items it has been sent, ahead of
pytest. xdist's load scheduler sends a worker a few items at first and then, once items take
longer than 0.1 s (every model trial does), only keeps two pending per worker: the other N - 2
trial slots would stay empty. `ConcurrentLoadScheduling` tops every worker up to N pending
items instead, so `-n W --concurrency N` has W x N trials in flight.
"""

from __future__ import annotations

from typing import Any

import pytest
from xdist.scheduler import LoadScheduling  # type: ignore[import-untyped]

__all__ = ["ConcurrentLoadScheduling", "scheduler_for"]


class ConcurrentLoadScheduling(LoadScheduling):  # type: ignore[misc]
    """`LoadScheduling` that keeps `ahead` items pending on every worker while any are left."""

    def __init__(self, config: pytest.Config, log: Any = None, *, ahead: int) -> None:
        super().__init__(config, log)
        self.ahead = ahead

    def _top_up(self, node: Any) -> None:
        missing = self.ahead - len(self.node2pending[node])
        if missing > 0 and self.pending:
            self._send_tests(node, missing)

    def schedule(self) -> None:
        initial = self.collection is None
        super().schedule()
        if not initial or not self.collection:
            return
        for node in self.nodes:
            self._top_up(node)
        if not self.pending:
            for node in self.nodes:
                if not node.shutting_down:
                    node.shutdown()

    def check_schedule(self, node: Any, duration: float = 0) -> None:
        if node.shutting_down:
            return
        if self.pending:
            self._top_up(node)
        else:
            node.shutdown()


def scheduler_for(config: pytest.Config, concurrency: int, log: Any) -> Any:
    """The scheduler for `-n` with `--dist load` (the default) when each worker runs more
    than one trial at once; None leaves the choice to xdist."""
    if concurrency <= 1 or config.getoption("dist", "no") != "load":
        return None
    return ConcurrentLoadScheduling(config, log, ahead=concurrency)
