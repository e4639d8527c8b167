"""A map whose values are computed once per key, however many threads ask at the same time.

Concurrent trials (`--concurrency`) all provision, fingerprint and probe the same dataset at
the start of a run; without this, each of N threads would hash the same template and scan the
same tables at once, and the first N trials would each pay N times the cost.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["OnceMap"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class OnceMap(Generic[K, V]):
    """`get(key, compute)` runs `compute()` for the first caller of a key; the others wait for
    its value. A failed computation is not cached: the next caller tries again."""

    def __init__(self) -> None:
        self._values: dict[K, V] = {}
        self._locks: dict[K, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, key: K, compute: Callable[[], V]) -> V:
        if key in self._values:  # dict reads are atomic under the GIL
            return self._values[key]
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._values:
                self._values[key] = compute()
            return self._values[key]

    def peek(self, key: K) -> V | None:
        """The value if it has been computed, without computing it."""
        return self._values.get(key)

    def pop(self, key: K) -> V | None:
        """Remove a key's value (waiting for a computation of it under way), if any: the next
        caller of `get` computes it again."""
        with self._guard:
            lock = self._locks.get(key)
        if lock is None:
            return None
        with lock:
            return self._values.pop(key, None)

    def asked(self) -> list[K]:
        """Every key asked for so far (computed, under way or failed)."""
        with self._guard:
            return list(self._locks)

    def drain(self) -> list[V]:
        """Every computed value, removed from the map (for teardown)."""
        with self._guard:
            values, self._values, self._locks = list(self._values.values()), {}, {}
        return values
