"""Probes built ahead (`Probes.warm`) wait for their gate, the session's first model request
to come back: under one GIL their build would otherwise delay that request. Without a gate
they start at once. A SQLite source of a project of its own, its perturbed copies built for real."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from helpers import orders_store

from pytest_backintel.evidence.probe import Probes
from stores.base import DatasetFiles


def built(cache: Path, timeout_s: float) -> list[Path]:
    """The perturbed copies under `cache` once both salts' are there (or at the timeout)."""
    end = time.monotonic() + timeout_s
    while True:
        found = sorted(p for p in cache.glob("shop-sqlite-*") if p.is_dir())
        if len(found) == 2 or time.monotonic() > end:
            return found
        time.sleep(0.05)


def test_probes_warmed_ahead_wait_for_their_gate_and_start_at_once_without_one(
    tmp_path: Path,
) -> None:
    backend, store = orders_store(tmp_path / "gated", 300)
    store.teardown()
    db = tmp_path / "gated" / "shop.sqlite"
    files = DatasetFiles("shop", db, sqlite_path=db)
    probes = Probes(lambda: tmp_path / "gated" / "perturbed")
    gate = threading.Event()
    try:
        probes.warm("sqlite", backend, files, None, "h1", after=gate.wait)
        assert built(tmp_path / "gated" / "perturbed", timeout_s=1.0) == [], "built before"
        gate.set()
        assert len(built(tmp_path / "gated" / "perturbed", timeout_s=60)) == 2
        assert len(probes.get("sqlite", backend, files, None, "h1")) == 2
    finally:
        gate.set()
        probes.teardown()
        backend.teardown_session()

    backend, store = orders_store(tmp_path / "ungated", 300)
    store.teardown()
    db = tmp_path / "ungated" / "shop.sqlite"
    files = DatasetFiles("shop", db, sqlite_path=db)
    probes = Probes(lambda: tmp_path / "ungated" / "perturbed")
    try:
        probes.warm("sqlite", backend, files, None, "h1")
        assert len(built(tmp_path / "ungated" / "perturbed", timeout_s=60)) == 2
    finally:
        probes.teardown()
        backend.teardown_session()
