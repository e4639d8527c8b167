"""The viewer (`backintel view`, also written by `backintel report`) in headless Chromium:
filter a run of several hundred trials, open a trial and read its checks, evidence, probes and
transcript; the comparison with a baseline and a case side by side; hostile analyst text shown
as text with no script run; a real perturbed run against a reference run; chart labels that
fit in a browser's font. Debian's Chromium through Playwright: nothing is downloaded."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from playwright.sync_api import Browser
from view_pages import HOSTILE, Opened, chromium, detailed_record, open_view

from reports import build_report, load_run
from reports.cli import main as reports_main
from reports.testing import header, record, synthetic_records, write_run
from reports.view import write_view

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def browser() -> Browser:
    with chromium() as b:
        yield b  # type: ignore[misc]


def _only_local(opened: Opened) -> None:
    assert opened.console == []
    assert opened.requests, "the page loaded nothing"
    assert all(url.startswith("file://") for url in opened.requests), opened.requests


def _several_hundred(tmp_path: Path, name: str = "run") -> Path:
    records = synthetic_records(300, run_id=name)
    records[7] = detailed_record("synthetic-00007", "wrong_value", run_id=name, trial=1)
    records[8] = detailed_record("synthetic-00008", "pass", run_id=name, trial=1)
    refused = record("synthetic-00009", "unhelpful_refusal", answerable=False, trial=1)
    refused["answer"] = {"status": "refused", "missing": ["ages"], "explanation": "No ages."}
    refused["refusal"] = {
        "forbidden_metric": "average_customer_age",
        "refused": True,
        "concepts": [{"synonyms": ["birth date", "date of birth"], "named": False}],
    }
    records[9] = refused
    return write_run(tmp_path / name, header(name), records)


def test_report_writes_the_viewer_and_a_filtered_trial_opens(
    browser: Browser, tmp_path: Path
) -> None:
    files = build_report(_several_hundred(tmp_path))
    opened = open_view(browser, files.view.index)
    page = opened.page
    assert page.locator("#count").text_content() == "300 of 300 trials"
    assert "CALIBRATION RUN" in (page.locator("#banners").text_content() or "")
    assert page.locator("#charts img").count() == 3
    wrong = sum(
        r["outcome"] == "wrong_value" for r in load_run(files.view.index.parent.parent).records
    )
    page.select_option("#f-outcome", "wrong_value")
    assert page.locator("#count").text_content() == f"{wrong} of 300 trials"
    assert {page.locator("#list .row .c-outcome").nth(i).text_content() for i in range(5)} == {
        "wrong_value"
    }
    page.fill("#f-text", "synthetic-00007")
    assert page.locator("#count").text_content() == "1 of 300 trials"
    page.locator("#list .row").first.click()
    detail = page.locator("#detail .trial")
    detail.wait_for()
    assert page.locator("#detail td.expected").first.text_content() == "97"
    assert page.locator("#detail td.reported").first.text_content() == "99"
    assert page.locator("#detail td.verdict").first.text_content() == "fail"
    evidence = page.locator("#detail .evidence").first
    assert "SELECT count(*) AS orders FROM orders" in (evidence.text_content() or "")
    assert "not accepted" in (evidence.text_content() or "")
    assert page.locator("#detail table.probes tr").count() == 3  # header and two probes
    transcript = page.locator("#detail ol.transcript li")
    assert [transcript.nth(i).locator("b").text_content() for i in range(transcript.count())] == [
        "instructions",
        "user",
        "model (test-model)",
        "tool call: run_sql",
        "tool result: run_sql",
    ]
    assert "uncalibrated" in (page.locator("#detail").text_content() or "")
    page.select_option("#f-outcome", "")
    page.fill("#f-text", "synthetic-00009")
    page.locator("#list .row").first.click()
    page.locator("#detail table.concepts").wait_for()
    concepts = page.locator("#detail table.concepts tbody").text_content()
    assert concepts == "birth date / date of birthnot named"
    assert page.locator("#detail ul.missing").text_content() == "ages"
    page.fill("#f-text", "")
    page.select_option("#f-sort", "latency_s:desc")
    top = page.locator("#list .row .c-latency").first.text_content()
    slowest = max(r["latency_s"] or 0 for r in load_run(files.view.index.parent.parent).records)
    assert top == f"{slowest:.2f}"
    _only_local(opened)


def test_hostile_text_is_shown_as_text_and_never_runs(browser: Browser, tmp_path: Path) -> None:
    huge = "y" * 1_000_000
    records = [
        detailed_record("hostile", text=HOSTILE, tool_result=huge),
        record("plain", question=f"What about {HOSTILE}?"),
    ]
    site = write_view(load_run(write_run(tmp_path / "run", header("run"), records)))
    opened = open_view(browser, site.index)
    page = opened.page
    page.fill("#f-text", "<script>")
    assert page.locator("#count").text_content() == "1 of 2 trials"
    page.locator("#list .row").first.click()
    page.locator("#detail .trial").wait_for()
    page.fill("#f-text", "hostile")
    page.locator("#list .row").first.click()
    page.locator("#detail .evidence").wait_for()
    text = page.locator("#detail").text_content() or ""
    assert text.count(HOSTILE) >= 5  # unit, method, caveat, code, transcript
    assert "truncated: 1,000,000 characters in all, the first 4,000 shown" in text
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator("#detail img, #detail script, #list img, #list script").count() == 0
    _only_local(opened)


def test_the_hostile_check_catches_markup_that_runs(browser: Browser, tmp_path: Path) -> None:
    """The same check fails a page that puts the text in as HTML."""
    page_file = tmp_path / "bad.html"
    page_file.write_text(
        "<html><body><div id=x></div><script>"
        f"document.getElementById('x').innerHTML = {HOSTILE!r}.replace('<script>', '');"
        "</script></body></html>"
    )
    page = browser.new_page()
    page.goto(page_file.as_uri())
    page.wait_for_function("window.__pwned !== undefined", timeout=10_000)
    assert page.evaluate("window.__pwned") == 2


def test_comparison_pairs_every_case_and_opens_two_trials_side_by_side(
    browser: Browser, tmp_path: Path
) -> None:
    base = [detailed_record(f"case-{i}", "pass", trial=1, run_id="base") for i in range(6)]
    cand = [
        detailed_record(f"case-{i}", outcome, trial=1, run_id="cand")
        for i, outcome in enumerate(["pass", "wrong_value", "wrong_value", "pass", "pass", "pass"])
    ]
    cand.append(record("case-6", "infra_error", trial=1, run_id="cand"))
    base.append(record("case-6", "wrong_value", trial=1, run_id="base"))
    baseline = load_run(write_run(tmp_path / "base", header("base"), base))
    site = write_view(load_run(write_run(tmp_path / "cand", header("cand"), cand)), baseline)
    opened = open_view(browser, site.index)
    page = opened.page
    page.click("#tab-compare")
    assert page.locator("#compare .decision").text_content() == "decision: REJECT"
    assert (page.locator("#compare .run-line.baseline").text_content() or "").startswith(
        "baseline base: 6 of 7 attempted trials passed"
    )
    rows = page.locator("#compare table.pairs tbody tr")
    changes = {
        rows.nth(i).locator("td.case").text_content(): rows.nth(i)
        .locator("td.change")
        .text_content()
        for i in range(rows.count())
    }
    assert changes == {
        "case-0": "both_pass", "case-1": "broken", "case-2": "broken", "case-3": "both_pass",
        "case-4": "both_pass", "case-5": "both_pass", "case-6": "blocked",
    }  # fmt: skip
    assert "p_value" in (page.locator("#compare table.stats").text_content() or "")
    page.select_option("#f-change", "broken")
    assert rows.count() == 2
    rows.first.locator("button.pair-open").click()
    page.locator("#pair .candidate .trial").wait_for()
    page.locator("#pair .baseline .trial").wait_for()
    assert page.locator("#pair .baseline .trial h2 .badge").text_content() == "pass"
    assert page.locator("#pair .candidate .trial h2 .badge").text_content() == "wrong_value"
    assert page.locator("#pair .candidate td.reported").first.text_content() == "99"
    _only_local(opened)


def _bench_run(results: Path, run_id: str, *analyst: str) -> Path:
    selection = "l1-delivered-orders or l1-average-review-score or l2-top-seller-revenue"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "development", *analyst, "--run-id", run_id,
         "-k", selection, "-p", "no:xdist", "-q", "--results-dir", str(results)],
        cwd=ROOT, capture_output=True, text=True, check=False, env={**os.environ},
    )  # fmt: skip
    ran = sum(int(n) for n in re.findall(r"(\d+) (?:passed|failed)", done.stdout))
    assert ran == 3, done.stdout[-2000:]  # the three cases, whatever else is deselected
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]
    return results / run_id


def test_a_perturbed_run_against_the_reference_run(browser: Browser, tmp_path: Path) -> None:
    """`backintel view results/p results/ref`: every case broken; a wrong_value trial found
    by filter shows its expected and reported values and its evidence."""
    ref = _bench_run(tmp_path, "ref")
    perturbed = _bench_run(tmp_path, "p", "--analyst", "perturbed")
    assert reports_main(["view", str(perturbed), str(ref)]) == 0
    opened = open_view(browser, perturbed / "view" / "index.html")
    page = opened.page
    assert page.locator("#count").text_content() == "3 of 3 trials"
    page.select_option("#f-outcome", "wrong_value")
    assert page.locator("#count").text_content() == "3 of 3 trials"
    page.fill("#f-text", 'order status "delivered"')  # words of its question
    assert page.locator("#count").text_content() == "1 of 3 trials"
    page.locator("#list .row").first.click()
    page.locator("#detail .trial").wait_for()
    record = next(
        r for r in load_run(perturbed).records if r["scenario_id"] == "l1-delivered-orders"
    )
    check = record["checks"][0]
    assert page.locator("#detail td.expected").first.text_content() == str(check["expected"])
    assert page.locator("#detail td.reported").first.text_content() == str(check["got"])
    assert check["expected"] != check["got"]
    evidence = page.locator("#detail .evidence").first.text_content() or ""
    assert record["evidence"][0]["code"] in evidence
    assert "re-execution gave a different value" in evidence
    assert "Question" in (page.locator("#detail").text_content() or "")
    page.click("#tab-compare")
    changes = page.locator("#compare table.pairs td.change")
    assert changes.count() == 3
    assert {changes.nth(i).text_content() for i in range(3)} == {"broken"}
    page.locator("#compare tr", has_text="l1-delivered-orders").locator("button").click()
    page.locator("#pair .baseline .trial").wait_for()
    page.locator("#pair .candidate .trial").wait_for()
    assert page.locator("#pair .baseline table.probes tr").count() == 3  # re-run on 2 probes
    assert page.locator("#pair .candidate .trial h2 .badge").text_content() == "wrong_value"
    _only_local(opened)


def test_chart_labels_fit_inside_the_chart_in_a_browser(browser: Browser, tmp_path: Path) -> None:
    families = ["customers", "entire_current_period_unobserved", "partially_covered_expense_ledger"]
    records = [record(f"c{i}", family=f) for i, f in enumerate(families)]
    files = build_report(write_run(tmp_path / "run", header("run"), records))
    page = browser.new_page()
    for chart in files.charts:
        page.goto(chart.svg.as_uri())
        outside = page.evaluate(
            """() => { const box = document.documentElement.getBoundingClientRect();
                return [...document.querySelectorAll('text')].filter((t) => {
                  const r = t.getBoundingClientRect();
                  return r.width > 0 && (r.left < box.left - 0.5 || r.right > box.right + 0.5);
                }).map((t) => t.textContent); }"""
        )
        assert outside == [], chart.name


def test_a_reviewed_trial_shows_its_override_and_history(browser: Browser, tmp_path: Path) -> None:
    """`backintel review` twice on one trial: the list marks it, the opened trial shows the
    recorded outcome and both reviews; the headline carries the pass rate's interval (#37)."""
    records = [
        detailed_record("reviewed-case", "wrong_value", run_id="rv", trial=1),
        record("other-case", "pass", trial=1, run_id="rv"),
    ]
    folder = write_run(tmp_path / "rv", header("rv"), records)
    for outcome, reason, author in (
        ("pass", "the unit is cents", "Ann"),
        ("fail", "no, dollars", "Bo"),
    ):
        args = ["review", str(folder), "reviewed-case/t1", "--outcome", outcome]
        assert reports_main([*args, "--reason", reason, "--author", author]) == 0
    assert reports_main(["view", str(folder)]) == 0
    opened = open_view(browser, folder / "view" / "index.html")
    page = opened.page
    assert "[" in (page.locator("#headline").text_content() or "")  # pass rate [low, high]
    assert page.locator("#rates tr").count() > 2
    row = page.locator("#list .row", has_text="reviewed-case")
    mark = row.locator(".c-outcome .reviewed")
    assert mark.text_content() == "✎ fail"
    assert mark.get_attribute("title") == (
        "reviewed by a person: fail (the recorded outcome follows)"
    )
    row.click()
    page.locator("#detail table.reviews").wait_for()
    text = page.locator("#detail").text_content() or ""
    assert "recorded outcome: wrong_value" in text
    cells = page.locator("#detail table.reviews tbody tr")
    assert cells.count() == 2
    assert "Ann" in (cells.nth(0).text_content() or "")
    assert "the unit is cents" in (cells.nth(0).text_content() or "")
    assert "no, dollars" in (cells.nth(1).text_content() or "")
    _only_local(opened)
