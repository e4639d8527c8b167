"""On an embedded backend (`capabilities.server` None) a world's data probes are written ahead,
in the background right after the world is built, without waiting for an item to set the
backend up: while the analyst answers the first item (Olist on SQLite), TPC-H's probes on
`lake-parquet`, which no item has set up yet, get written. (A backend with a server to start
still waits for an item to start it: a server started in the short-lived background thread
would die with it.)"""

from __future__ import annotations

import json

import pytest

from pytest_backintel.collect.loading import DEFINITIONS_DIR

FIRST = DEFINITIONS_DIR / "level1" / "l1-delivered-orders.scenario.yaml"
LATER = DEFINITIONS_DIR / "level7" / "l7-q6-forecast-revenue-change.scenario.yaml"

WAITER = """
import os, time
from pathlib import Path

from pytest_backintel.analyst_api import AnalystRun
from pytest_backintel.contract import Refusal


class _Waiter:
    name = "waiter"
    kind = "custom"

    def answer(self, task):
        refusal = AnalystRun(output=Refusal(missing=["nothing"], explanation="waited"))
        if not str(task.case_key).startswith("l1-"):
            return refusal
        copies = Path(os.environ["BACKINTEL_DATA_DIR"]) / "perturbed"
        deadline = time.monotonic() + 60
        while not list(copies.glob("tpch-*/perturbed.json")) and time.monotonic() < deadline:
            time.sleep(0.05)
        seen = sorted(p.parent.name for p in copies.glob("tpch-*/perturbed.json"))
        Path(os.environ["WAITER_SAW"]).write_text(repr(seen))
        return refusal


def waiter(config):
    return _Waiter()
"""


def test_probes_on_an_embedded_backend_no_item_set_up_yet_are_written_ahead(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(waiter=WAITER)
    saw = pytester.path / "saw.txt"
    monkeypatch.setenv("BACKINTEL_DATA_DIR", str(pytester.path / "data"))
    monkeypatch.setenv("WAITER_SAW", str(saw))
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    monkeypatch.setenv("BACKINTEL_TPCH_SF", "0.01")
    pytester.runpytest_subprocess(
        str(FIRST), str(LATER), "--analyst", "waiter:waiter",
        "--results-dir", str(pytester.path / "results"), "--run-id", "r",
        "-p", "no:cacheprovider", "-p", "no:xdist",
    )  # fmt: skip
    records = (pytester.path / "results" / "r" / "records.jsonl").read_text().splitlines()
    assert [json.loads(r)["scenario_id"] for r in records] == [
        "l1-delivered-orders",
        "l7-q6-forecast-revenue-change",
    ]
    assert saw.read_text().startswith("['tpch-"), "TPC-H's probes waited for its item"
