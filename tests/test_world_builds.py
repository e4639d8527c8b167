"""Worlds built once per process, by the first caller or ahead of time in the background."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from pytest_backintel.records.live import Running, status_line
from pytest_backintel.run.world_builds import Ahead, WorldBuilds


def test_each_world_is_built_once_and_every_caller_gets_it() -> None:
    builds: WorldBuilds[str, int] = WorldBuilds()
    calls: list[str] = []
    gate = threading.Event()

    def build() -> int:
        calls.append("tpch")
        gate.wait(5)
        return 42

    got: list[int] = []
    threads = [
        threading.Thread(target=lambda: got.append(builds.get("tpch", build))) for _ in range(4)
    ]
    for t in threads:
        t.start()
    time.sleep(0.1)
    assert [label for label, _ in builds.building()] == ["tpch"]
    gate.set()
    for t in threads:
        t.join(5)
    assert calls == ["tpch"]
    assert got == [42, 42, 42, 42]
    assert builds.building() == []


def test_a_failed_build_fails_every_item_that_needs_it() -> None:
    builds: WorldBuilds[str, int] = WorldBuilds()

    def broken() -> int:
        raise OSError("disk full")

    thread = builds.prefetch([Ahead("tpch", broken, "world tpch (base)")])
    thread.join(5)
    with pytest.raises(OSError, match="disk full"):
        builds.get("tpch", lambda: 1)


def test_prefetch_builds_in_the_order_items_need_them_and_items_wait_only_for_the_rest() -> None:
    builds: WorldBuilds[str, str] = WorldBuilds()
    order: list[str] = []
    release = threading.Event()

    def slow(name: str) -> str:
        order.append(name)
        if name == "tpch":
            release.wait(5)
        return name

    thread = builds.prefetch(
        [
            Ahead("olist", lambda: slow("olist"), "olist"),
            Ahead("tpch", lambda: slow("tpch"), "tpch"),
        ]
    )
    assert builds.get("olist", lambda: "built again") == "olist"  # prefetched, not rebuilt
    deadline = time.monotonic() + 5
    while not builds.building() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [label for label, _ in builds.building()] == ["tpch"]
    release.set()
    assert builds.get("tpch", lambda: "built again") == "tpch"
    thread.join(5)
    assert order == ["olist", "tpch"]


def test_the_longest_build_goes_first_and_its_follow_up_runs_right_after_it() -> None:
    builds: WorldBuilds[str, str] = WorldBuilds()
    done: list[str] = []

    def ahead(name: str, cost: float, then_fails: bool = False) -> Ahead[str, str]:
        def then() -> None:
            done.append(f"probes {name}")
            if then_fails:
                raise OSError("disk full")

        return Ahead(name, lambda: done.append(name) or name, name, lambda: cost, then)

    def unknown() -> float:
        raise RuntimeError("a world that cannot say")

    wanted = [
        ahead("olist", 5.0),
        ahead("olist-split", 5.0, then_fails=True),
        ahead("tpch", 60.0),
        Ahead("mine", lambda: done.append("mine") or "mine", "mine", unknown),
        ahead("built", 0.0),
    ]
    builds.prefetch(wanted).join(5)
    assert done == [
        "tpch",
        "probes tpch",
        "olist",
        "probes olist",
        "olist-split",
        "probes olist-split",
        "mine",
        "built",
        "probes built",
    ]


def test_the_status_line_says_what_is_being_built_and_for_how_long() -> None:
    line = status_line([Running("building world tpch (base)", 0.0, counted=False)], 37.0, 120)
    assert line == "backintel: 1 running: building world tpch (base) 37s"


def test_a_world_says_how_long_its_build_takes_and_nothing_once_built(tmp_path: Path) -> None:
    from scenarios.tpch.world import TpchWorld
    from scenarios.world_base import COMPLETE_MARKER

    world = TpchWorld()
    assert world.build_cost(tmp_path, "sf0.5") == 15.0
    folder = world.build_dir(tmp_path, "sf0.5")
    folder.mkdir(parents=True)
    (folder / COMPLETE_MARKER).write_text("{}")
    assert world.build_cost(tmp_path, "sf0.5") == 0.0
