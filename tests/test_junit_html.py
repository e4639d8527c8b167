"""pytest's own reports: JUnit user properties (snapshot of a fixed calibration run, and
`outcome` on every item) and pytest-html columns and per-item extras."""

from __future__ import annotations

import html
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion

from pytest_backintel.collect.loading import DEFINITIONS_DIR
from pytest_backintel.records.html_report import item_extras, junit_properties

FEW = [
    DEFINITIONS_DIR / "level1" / "l1-item-grain.scenario.yaml",
    DEFINITIONS_DIR / "level1" / "l1-orders-by-status.scenario.yaml",
    DEFINITIONS_DIR / "level3" / "l3-customer-age.scenario.yaml",
]
STORE_ID = re.compile(r"\bbi_[0-9a-f]{12}\b")


def bench(pytester: pytest.Pytester, *args: str) -> tuple[Path, list[dict[str, Any]]]:
    results = pytester.path / "results"
    pytester.runpytest_subprocess(
        *map(str, FEW),
        "--results-dir",
        str(results),
        "--run-id",
        "r",
        "-p",
        "no:randomly",
        "--analyst",
        "perturbed",
        *args,
    )
    lines = (results / "r" / "records.jsonl").read_text().splitlines()
    return results / "r", [json.loads(line) for line in lines]


def junit_cases(path: Path) -> dict[str, list[tuple[str, str]]]:
    """testcase name (`<scenario>[t<trial>]`) -> its properties, store ids made stable."""
    return {
        str(case.get("name")): [
            (p.get("name", ""), STORE_ID.sub("bi_<id>", p.get("value", "")))
            for p in case.iter("property")
        ]
        for case in ET.parse(path).getroot().iter("testcase")
    }


def missing_outcome(cases: dict[str, list[tuple[str, str]]]) -> list[str]:
    """Cases that do not carry exactly one `outcome` property."""
    return [name for name, props in cases.items() if [n for n, _ in props].count("outcome") != 1]


def test_the_junit_properties_of_a_fixed_calibration_run(
    pytester: pytest.Pytester, snapshot: SnapshotAssertion
) -> None:
    _, _records = bench(pytester, "--junitxml", "junit.xml")
    cases = junit_cases(pytester.path / "junit.xml")
    assert cases == snapshot


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_every_item_carries_its_outcome(pytester: pytest.Pytester, workers: list[str]) -> None:
    _, records = bench(pytester, "--junitxml", "junit.xml", *workers)
    cases = junit_cases(pytester.path / "junit.xml")
    assert len(cases) == len(FEW)
    assert missing_outcome(cases) == []
    for record in records:
        assert dict(cases[record["nodeid"].rsplit("::", 1)[-1]])["outcome"] == record["outcome"]
    # the run's pass rate with its interval and method, as testsuite properties (#37)
    suite = ET.parse(pytester.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    props = {p.get("name"): p.get("value") for p in suite.iterfind("properties/property")}
    attempted = [r for r in records if r["outcome"] not in ("infra_error", "not_run")]
    rate = sum(r["outcome"] == "pass" for r in attempted) / len(attempted)
    assert props["backintel_pass_rate"] == f"{rate:.4f}"
    assert props["backintel_pass_rate_method"] == "Wilson 95%"
    assert (
        float(props["backintel_pass_rate_low"]) <= rate <= float(props["backintel_pass_rate_high"])
    )
    assert props["backintel_pass_rate[development]"] is not None


def test_the_outcome_check_rejects_a_case_without_one() -> None:
    good = [("outcome", "pass"), ("family", "f")]
    assert missing_outcome({"a": good, "b": [("family", "f")], "c": good + good}) == ["b", "c"]


def record(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "outcome": "wrong_value",
        "reasons": [{"message": "m1"}, {"message": "m2"}],
        "family": "f",
        "split": "development",
        "level": 2,
        "backend": "sqlite",
        "analyst": {"name": "perturbed"},
        "model": None,
        "trial": 1,
        "answer": {"metrics": [{"name": "n", "value": 1}]},
        "evidence": [
            {
                "id": "e1",
                "kind": "sql",
                "code": "SELECT <b>1</b>",
                "cited": ["n"],
                "ran": True,
                "error": None,
                "values": {"n": 1},
                "reproduced": {"n": False},
            },
            {
                "id": "e2",
                "kind": "sql",
                "code": "x",
                "cited": ["n"],
                "ran": False,
                "error": "no such table",
                "values": {},
                "reproduced": {},
            },
        ],
        "trace_id": "ab" * 16,
    }
    return base | extra


def test_junit_properties_come_from_the_record() -> None:
    props = dict(junit_properties(record(store="sqlite:bi_1")))
    assert props["reasons"] == "m1; m2"
    assert props["store"] == "sqlite:bi_1"
    assert props["model"] == ""
    assert dict(junit_properties(record()))["store"] == "sqlite", "the backend when unprovisioned"


def test_html_extras_show_question_answer_evidence_and_the_trace_link_escaped() -> None:
    body, link = item_extras("Why <script>?", record(), "run/traces.jsonl")
    assert "Why &lt;script&gt;?" in body["content"]
    assert "<script>" not in body["content"]
    assert "SELECT &lt;b&gt;1&lt;/b&gt;" in body["content"]
    assert "n NOT reproduced" in body["content"]
    assert "error: no such table" in body["content"]
    assert link == {**link, "format_type": "url", "content": "run/traces.jsonl"}
    assert link["name"] == f"trace {'ab' * 16}"
    assert len(item_extras("q", record(trace_id=None), "t")) == 1, "no trace, no link"


def report_tests(path: Path) -> dict[str, list[dict[str, Any]]]:
    blob = re.search(r'data-jsonblob="([^"]*)"', path.read_text())
    assert blob is not None
    tests: dict[str, list[dict[str, Any]]] = json.loads(html.unescape(blob[1]))["tests"]
    return tests


def test_pytest_html_shows_outcome_family_store_and_the_trial_extras(
    pytester: pytest.Pytester,
) -> None:
    run_dir, records = bench(pytester, "--html", "out/report.html", "-n", "2")
    page = (pytester.path / "out" / "report.html").read_text()
    for column in ("Outcome", "Family", "Store"):
        assert f'data-column-type="{column.lower()}">{column}</th>' in page
    tests = report_tests(pytester.path / "out" / "report.html")
    for rec in records:
        (entry,) = tests[rec["nodeid"]]
        row = "".join(entry["resultsTableRow"])
        assert f'<td class="col-outcome">{rec["outcome"]}</td>' in row
        assert f'<td class="col-family">{rec["family"]}</td>' in row
        (body,) = [e for e in entry["extras"] if e["format_type"] == "html"]
        assert "<h4>question</h4>" in body["content"]
        answer = json.dumps(rec["answer"], indent=2, sort_keys=True)
        assert html.escape(answer) in body["content"]
        for ev in rec["evidence"]:
            assert f"evidence {ev['id']}" in body["content"]
        (link,) = [e for e in entry["extras"] if e["format_type"] == "url"]
        assert link["name"] == f"trace {rec['trace_id']}"
        assert (pytester.path / "out" / link["content"]).resolve() == run_dir / "traces.jsonl"


def test_the_html_hooks_register_only_with_pytest_html_active(pytester: pytest.Pytester) -> None:
    plain = pytester.parseconfigure(str(FEW[0]))
    assert plain.pluginmanager.get_plugin("backintel-html") is None
    with_html = pytester.parseconfigure(str(FEW[0]), "--html", "r.html")
    assert with_html.pluginmanager.get_plugin("backintel-html") is not None
