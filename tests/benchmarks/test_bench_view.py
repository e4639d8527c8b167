"""The viewer on a synthetic run of 10,000 trials: writing the site, opening it in headless
Chromium, filtering the list by outcome and by text, sorting it, and opening a trial.

Printed (never asserted): seconds to write the site and its size, to load the page until its
list is ready, and milliseconds of each filter or sort in the page (from the change to the
redrawn list) and to open a trial (its chunk loaded and shown).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from view_pages import chromium, open_view

from reports.load import load_run
from reports.testing import header, synthetic_records, write_run
from reports.view import write_view

pytestmark = pytest.mark.benchmark

TRIALS = 10_000
CHANGE = """([id, value, event]) => {
  const box = document.getElementById(id);
  const start = performance.now();
  box.value = value;
  box.dispatchEvent(new Event(event));
  return [performance.now() - start, document.getElementById("count").textContent];
}"""


def test_view_of_ten_thousand_trials(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_run(tmp_path / "big", header("big"), synthetic_records(TRIALS, "big"))
    start = time.perf_counter()
    run = load_run(folder)
    loaded = time.perf_counter() - start
    start = time.perf_counter()
    site = write_view(run)
    written = time.perf_counter() - start
    data = site.index.parent / "data"
    size_mb = sum(p.stat().st_size for p in data.glob("*.js")) / 1e6
    index_mb = (data / "index.js").stat().st_size / 1e6
    steps: list[tuple[str, float, str]] = []
    with chromium() as browser:
        start = time.perf_counter()
        opened = open_view(browser, site.index)
        ready = time.perf_counter() - start
        page = opened.page
        for label, args in (
            ("filter outcome = wrong_value", ["f-outcome", "wrong_value", "change"]),
            ("filter level = 3 as well", ["f-level", "3", "change"]),
            ("search 'revenue total'", ["f-text", "revenue total", "input"]),
            ("clear the search", ["f-text", "", "input"]),
            ("sort by latency, slowest first", ["f-sort", "latency_s:desc", "change"]),
            ("sort by cost, highest first", ["f-sort", "cost_usd:desc", "change"]),
        ):
            ms, count = page.evaluate(CHANGE, args)
            steps.append((label, ms, count))
        start = time.perf_counter()
        page.locator("#list .row").first.click()
        page.locator("#detail .trial").wait_for()
        steps.append(("open a trial (its chunk loaded)", 1000 * (time.perf_counter() - start), ""))
        assert opened.console == []
    with capsys.disabled():
        print(f"\nviewer, synthetic run of {TRIALS} trials")
        print(f"load the run folder      {loaded:8.2f} s")
        print(
            f"write the site           {written:8.2f} s  "
            f"({size_mb:.1f} MB; index {index_mb:.1f} MB)"
        )
        print(f"open the page until ready {ready:7.2f} s")
        for label, ms, count in steps:
            print(f"{label:<34} {ms:8.1f} ms  {count}")
