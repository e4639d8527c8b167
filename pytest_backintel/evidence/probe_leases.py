"""When a dataset's data probes may be closed before the session ends.

A session releases a dataset's probes once its last item is done (`SessionData.item_done`):
their perturbed copies, engine sessions and provisioned stores need not stay open until the
end. A release never closes probes a running trial holds (`using`): it waits for the last
such trial to finish. A released dataset's probes are never built ahead again (`released`);
a trial that still asks for them builds them anew, and they are kept until the session ends.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

__all__ = ["ProbeLeases"]

K = TypeVar("K", bound=Hashable)


class ProbeLeases(Generic[K]):
    """Which probe keys running trials hold, and which have been released; `close(key)`
    closes a key's probes (called once per release, never while a trial holds the key)."""

    def __init__(self, close: Callable[[K], None]) -> None:
        self._close = close
        self._lock = threading.Lock()
        self._users: Counter[K] = Counter()
        self._pending: set[K] = set()
        """Released while held: closed when the last holder lets go."""
        self._closing: dict[K, threading.Event] = {}
        self.released: set[K] = set()
        """Keys whose probes no more items of the session need (never built ahead again)."""

    @contextlib.contextmanager
    def using(self, key: K) -> Iterator[None]:
        """Hold `key`'s probes for a trial: no release closes them until it lets go (one under
        way is waited for, so the trial builds them anew rather than get closed ones)."""
        while True:
            with self._lock:
                closing = self._closing.get(key)
                if closing is None:
                    self._users[key] += 1
                    break
            closing.wait()
        try:
            yield
        finally:
            with self._lock:
                self._users[key] -= 1
                due = self._users[key] == 0 and key in self._pending
                if self._users[key] == 0:
                    del self._users[key]
                    self._pending.discard(key)
            if due:
                self.release(key)

    def release(self, key: K) -> bool:
        """Close `key`'s probes now, or (False) when the last trial holding them lets go."""
        with self._lock:
            self.released.add(key)
            if self._users[key]:
                self._pending.add(key)
                return False
            if key in self._closing:  # another release is closing them
                return True
            done = self._closing[key] = threading.Event()
        try:
            self._close(key)
        finally:
            with self._lock:
                del self._closing[key]
            done.set()
        return True
