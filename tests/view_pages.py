"""Shared by the viewer's tests and benchmark: Debian's Chromium driven by Playwright (no
browser is downloaded), and trial records with every part the viewer shows."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from reports.testing import record

CHROMIUM = os.environ.get("BACKINTEL_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


@contextmanager
def chromium() -> Iterator[Browser]:
    """Debian's Chromium under Playwright; skipped where it is not installed (failed on CI)."""
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: CI must `apt-get install -y chromium`")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium)")
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Opened:
    page: Page
    console: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


def open_view(browser: Browser, index: Path) -> Opened:
    """A new page on the site's `index.html`, ready (its data loaded); console messages,
    page errors and every request it makes are collected."""
    page = browser.new_page()
    opened = Opened(page)
    page.on("console", lambda m: opened.console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: opened.console.append(f"pageerror: {e}"))
    page.on("request", lambda r: opened.requests.append(r.url))
    page.goto(index.resolve().as_uri())
    page.wait_for_selector("body[data-ready=yes]", timeout=30_000)
    return opened


def detailed_record(
    case: str, outcome: str = "wrong_value", *, text: str = "", tool_result: str = "", **kw: Any
) -> dict[str, Any]:
    """A trial record as the harness writes it for an answered case: answer, checks, evidence
    with two probe runs, judge and a transcript; `text` is put into every analyst string."""
    rec = record(case, outcome, **kw)
    sql = f"SELECT count(*) AS orders FROM orders {text}"
    reported = 99 if outcome == "wrong_value" else 97
    rec["answer"] = {
        "status": "answered",
        "metrics": [{"name": "orders", "value": reported, "unit": f"orders{text}"}],
        "evidence": [{"id": "e1", "kind": "sql", "code": sql, "metrics": ["orders"]}],
        "method": f"Counted the orders. {text}",
        "caveats": [f"none {text}"],
    }
    ok = outcome == "pass"
    rec["checks"] = [
        {
            "name": "orders",
            "kind": "count",
            "expected": 97,
            "got": reported,
            "tolerance": 0,
            "value_ok": ok,
            "evidence_ok": ok,
            "detail": "" if ok else f"expected 97, got {reported} (off by 2, tolerance 0)",
        }
    ]
    rec["evidence"] = [
        {
            "id": "e1",
            "kind": "sql",
            "code": sql,
            "cited": ["orders"],
            "ran": True,
            "error": None,
            "values": {"orders": 97},
            "reproduced": {"orders": ok},
            "details": {} if ok else {"orders": "re-execution gave a different value: 97"},
            "probes": [
                {"probe": 1, "values": {"orders": 95}, "expected": {"orders": 95},
                 "followed": {"orders": True}},
                {"probe": 2, "values": {"orders": 90}, "expected": {"orders": 90},
                 "followed": {"orders": True}},
            ],
        }
    ]  # fmt: skip
    rec["judge"] = {"scores": {"descriptive_not_causal": 4}, "calibrated": False}
    rec["messages"] = [
        {
            "kind": "request",
            "instructions": "You are a careful data analyst.",
            "parts": [{"part_kind": "user-prompt", "content": rec["question"]}],
        },
        {
            "kind": "response",
            "model_name": "test-model",
            "parts": [
                {"part_kind": "text", "content": f"Let me count. {text}"},
                {"part_kind": "tool-call", "tool_name": "run_sql", "args": {"sql": sql},
                 "tool_call_id": "c1"},
            ],
        },
        {
            "kind": "request",
            "instructions": "You are a careful data analyst.",
            "parts": [{"part_kind": "tool-return", "tool_name": "run_sql",
                       "content": tool_result or f"orders\n97 {text}", "tool_call_id": "c1"}],
        },
    ]  # fmt: skip
    return rec
