"""The heap of a benchmark process is frozen after collection and again at its end
(`pytest_backintel.run.heap`), and, when its trials call a model, at the session's start; a
session without benchmark items, or nested in another, is left alone."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_own_data import backintel, project

from pytest_backintel.run import heap
from pytest_backintel.testing.model_server import ModelServer

CONFTEST = """
import gc, json, os
import pytest

SEEN = {}


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    SEEN["session_start"] = gc.get_freeze_count()


def pytest_runtest_setup(item):
    SEEN.setdefault("first_item", gc.get_freeze_count())


def pytest_unconfigure(config):
    SEEN["end"] = gc.get_freeze_count()
    name = os.environ["FREEZE_COUNTS"] + "." + os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(name, "w") as out:
        json.dump(SEEN, out)
"""


def _freeze_counts(
    folder: Path, tmp: Path, *args: str, passing: bool = True
) -> dict[str, dict[str, int]]:
    """Each process's freeze counts, by worker (`main` for a serial run or the controller)."""
    counts = tmp / f"counts-{len(list(tmp.glob('counts-*')))}"
    # not this test's own xdist worker name (the inner processes name theirs)
    outer_env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env=outer_env | {"FREEZE_COUNTS": str(counts)},
    )
    assert done.returncode == 0 or not passing, done.stdout + done.stderr
    return {p.suffix[1:]: json.loads(p.read_text()) for p in tmp.glob(f"{counts.name}.*")}


def test_a_benchmark_session_freezes_after_collection_and_at_its_end(tmp_path: Path) -> None:
    folder = project(tmp_path / "shop")
    assert backintel(folder, "references", "build").returncode == 0
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "test_plain.py").write_text("def test_plain():\n    assert [1] != [2]\n")

    serial = _freeze_counts(folder, tmp_path, "scenarios", "-k", "delivered", "-p", "no:xdist")
    assert serial["main"]["session_start"] == 0  # the reference analyst imports no model
    assert serial["main"]["first_item"] > 0
    assert serial["main"]["end"] > serial["main"]["first_item"]  # what trials left is too

    workers = _freeze_counts(folder, tmp_path, "scenarios", "-n", "2")
    assert sorted(workers) == ["gw0", "gw1", "main"]
    assert all(workers[w]["first_item"] > 0 for w in ("gw0", "gw1"))
    assert "first_item" not in workers["main"]  # the controller runs no item
    assert workers["main"]["end"] > 0  # yet merges the records, then freezes

    plain = _freeze_counts(folder, tmp_path, "test_plain.py", "-p", "no:xdist")
    assert plain == {"main": {"session_start": 0, "first_item": 0, "end": 0}}


def test_a_model_session_freezes_before_it_imports_the_model(
    tmp_path: Path, model_server: ModelServer
) -> None:
    """What pytest and the plugins left alive is frozen before Pydantic AI's import, which
    the session's start does (the run header names the model's API)."""
    folder = project(tmp_path / "shop")
    assert backintel(folder, "references", "build").returncode == 0
    (folder / "conftest.py").write_text(CONFTEST)
    model = ("--model", "openai:bench", "--model-base-url", model_server.url)
    args = ("scenarios", "-k", "delivered", "-p", "no:xdist", *model)
    counts = _freeze_counts(folder, tmp_path, *args, passing=False)  # nothing scripted: 400
    assert counts["main"]["session_start"] > 0
    assert counts["main"]["end"] >= counts["main"]["first_item"] >= counts["main"]["session_start"]
    collecting = _freeze_counts(folder, tmp_path, *args, "--collect-only")
    assert collecting["main"]["session_start"] == 0  # no trial runs: nothing frozen so early


def test_a_nested_session_or_one_without_items_leaves_the_heap_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = gc.get_freeze_count()
    monkeypatch.setattr(heap, "_sessions", 1)
    heap.freeze_before_model(False)
    heap.freeze_after_collection(False)
    heap.freeze_at_end(False)
    assert gc.get_freeze_count() == before
    monkeypatch.setattr(heap, "_sessions", 2)
    heap.freeze_before_model(True)
    heap.freeze_after_collection(True)
    heap.freeze_at_end(True)
    assert gc.get_freeze_count() == before
