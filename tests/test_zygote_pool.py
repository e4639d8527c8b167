"""Two trials' Python evidence at once (issue 39, item 1): a run that finds the zygote busy with
another run gets a second zygote, as isolated as the first, instead of a fresh sandbox.

Real bwrap sandboxes and cgroups (skipped where this machine has neither).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_zygote import LIMITS

from pytest_backintel.sandbox import SandboxUnavailable
from pytest_backintel.sandbox import zygote as zygote_module
from pytest_backintel.sandbox.bwrap import BwrapProvider
from pytest_backintel.sandbox.zygote import forked_run

MARK = "import os, json\nopen('/tmp/mark', 'a').write('x')\nprint(json.dumps(os.listdir('/tmp')))"


@pytest.fixture
def bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[BwrapProvider]:
    """A provider of its own (a pool starts empty), its zygotes preloading little."""
    monkeypatch.setattr(zygote_module, "PRELOAD", ("json", "backintel_store"))
    monkeypatch.setattr(zygote_module, "_WAIT_S", 60.0)  # a start-up under load, not a skip
    with contextlib.ExitStack() as stack:
        try:
            provider = stack.enter_context(BwrapProvider(tmp_path, limits=LIMITS))
        except SandboxUnavailable as exc:
            pytest.skip(str(exc))
        if not provider.cgroup_mode:
            pytest.skip("no writable cgroup here: evidence runs in fresh sandboxes")
        yield provider


def _marks(provider: BwrapProvider) -> list[str]:
    result = forked_run(provider, None, MARK, LIMITS, None)
    assert result is not None, "the run went to a fresh sandbox"
    assert result.ok, result
    return list(json.loads(result.stdout))


def test_a_run_that_finds_the_zygote_busy_is_forked_from_a_second(bwrap: BwrapProvider) -> None:
    assert _marks(bwrap) == ["mark"]
    first = zygote_module._zygote(bwrap, LIMITS)
    assert first is not None
    assert first._proc is not None  # started by the run above
    with first.lock:  # another trial's run holds it
        assert _marks(bwrap) == ["mark"]  # nothing left by the first zygote's run
    pool = bwrap.__dict__["_zygotes"][LIMITS]
    assert len(pool) == zygote_module.POOL == 2
    started = [z._proc.pid for z in pool if z._proc is not None and z._proc.poll() is None]
    assert len(set(started)) == 2
    assert _marks(bwrap) == ["mark"]  # and each is cleaned after its run


def test_no_second_zygote_while_the_first_is_still_starting(bwrap: BwrapProvider) -> None:
    first = zygote_module._zygote(bwrap, LIMITS)
    assert first is not None
    zygote_module.warm(bwrap, LIMITS)  # holds the lock while it starts
    assert _marks(bwrap) == ["mark"]
    assert len(bwrap.__dict__["_zygotes"][LIMITS]) == 1
