"""Open scorecard.html in headless Chromium (Debian's `chromium`): no console errors, and the
page shows the calibration label, the tables and the charts. Nothing downloads a browser."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from reports import CALIBRATION_BANNER, build_report
from reports.testing import header, record, write_run

CHROMIUM = os.environ.get("BACKINTEL_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CONSOLE = re.compile(r":CONSOLE(?:\(\d+\))?:?\d*\]\s*(.*)")


@pytest.fixture(scope="module")
def chromium() -> str:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: CI must `apt-get install -y chromium`")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium)")
    return CHROMIUM


def open_page(browser: str, page: Path, profile: Path) -> tuple[str, list[str]]:
    """The DOM after load and every console message Chromium logged while loading it."""
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [m.group(1) for line in done.stderr.splitlines() if (m := CONSOLE.search(line))]
    return done.stdout, console


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "table":
            self.tables.append(values.get("id") or "")
        if tag == "img":
            self.images.append(values.get("src") or "")


def test_the_console_check_catches_a_script_error(chromium: str, tmp_path: Path) -> None:
    page = tmp_path / "bad.html"
    page.write_text(
        "<html><body><script>console.error('boom'); missingFn();</script></body></html>"
    )
    _, console = open_page(chromium, page, tmp_path / "profile")
    assert any("boom" in m for m in console)
    assert any("missingFn is not defined" in m for m in console)


def test_scorecard_opens_cleanly_with_label_tables_and_charts(
    chromium: str, tmp_path: Path
) -> None:
    records = [
        rec
        for t in (0, 1)
        for rec in (
            record("delivered_orders", trial=t),
            record("repeat_person_share", "wrong_value", trial=t, level=2, family="repeat"),
            record("original_missing_cost", "infra_error", trial=t, split="regression"),
        )
    ]
    folder = write_run(tmp_path / "run", header("run", trials=2), records)
    files = build_report(folder)
    dom, console = open_page(chromium, files.html, tmp_path / "profile")
    assert console == []
    assert CALIBRATION_BANNER in dom
    page = _Page()
    page.feed(dom)
    assert page.tables == [
        "facts", "outcomes", "by-split", "by-level", "by-family", "by-group", "by-store", "usage",
        "pass-k", "cases",
    ]  # fmt: skip
    assert "repeat_person_share" in dom
    assert len(page.images) == 3
    for src in page.images:
        assert (folder / src).is_file(), src
