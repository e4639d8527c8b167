"""`OnceMap`: concurrent trials compute a shared value once, and a failure is not kept."""

from __future__ import annotations

import threading
import time

import pytest

from stores.common.once import OnceMap


def test_threads_asking_at_once_compute_the_value_once() -> None:
    cache: OnceMap[str, int] = OnceMap()
    calls: list[int] = []
    start = threading.Barrier(8)

    def compute() -> int:
        calls.append(1)
        time.sleep(0.05)  # long enough for every other thread to be waiting
        return 42

    results: list[int] = []

    def ask() -> None:
        start.wait()
        results.append(cache.get("k", compute))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [42] * 8
    assert len(calls) == 1
    assert cache.peek("k") == 42


def test_a_failed_computation_is_tried_again_and_other_keys_do_not_wait() -> None:
    cache: OnceMap[str, int] = OnceMap()

    def fail() -> int:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        cache.get("k", fail)
    assert cache.peek("k") is None
    assert cache.get("k", lambda: 1) == 1
    assert cache.get("other", lambda: 2) == 2
    assert sorted(cache.drain()) == [1, 2]
    assert cache.peek("k") is None


def test_pop_waits_for_a_computation_under_way_and_the_next_get_computes_again() -> None:
    cache: OnceMap[str, int] = OnceMap()
    started, finish = threading.Event(), threading.Event()

    def slow() -> int:
        started.set()
        assert finish.wait(10)
        return 1

    builder = threading.Thread(target=cache.get, args=("k", slow))
    builder.start()
    assert started.wait(10)
    popped: list[int | None] = []
    popper = threading.Thread(target=lambda: popped.append(cache.pop("k")))
    popper.start()
    finish.set()
    builder.join(10)
    popper.join(10)
    assert popped == [1]
    assert cache.peek("k") is None
    assert cache.pop("never") is None
    assert cache.get("k", lambda: 2) == 2
    assert sorted(cache.asked()) == ["k"]
