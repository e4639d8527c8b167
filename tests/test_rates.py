"""Which rate gets which interval (`pytest_backintel.records.rates`), and that the terminal
summary, the workbook and run.json carry them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from openpyxl import load_workbook

from pytest_backintel.records.html_report import junit_run_properties, summary_lines
from pytest_backintel.records.rates import bootstrap_over_cases, run_intervals
from reports import build_report
from reports.testing import header, record, write_run


def trials() -> list[dict]:
    """6 cases x 3 trials: cases a-c pass 2 of 3, d-f all pass; e and f are unanswerable;
    every trial costs 0.01; latency grows with the case."""
    out = []
    for n, case in enumerate("abcdef"):
        for t in range(1, 4):
            outcome = "wrong_value" if case in "abc" and t == 3 else "pass"
            out.append(
                record(case, outcome, trial=t, answerable=case not in "ef", cost_usd=0.01,
                       latency_s=1.0 + n, split="development" if case < "d" else "regression")
            )  # fmt: skip
    out.append(record("g", "infra_error", trial=1))  # blocked: not in any rate
    return out


def test_every_rate_has_its_named_interval() -> None:
    got = run_intervals(trials())
    rate = got["pass_rate"]
    assert rate["estimate"] == pytest.approx((3 * 2 / 3 + 3) / 6)
    assert rate["method"] == "cluster-robust over 6 cases, 95%"
    assert (rate["cases"], rate["trials"]) == (6, 18)
    assert got["by"]["split"]["regression"]["method"].startswith("Wilson over 3 cases")
    assert got["pass_k"]["3"]["estimate"] == pytest.approx(0.5)  # a-c: C(2,3)=0; d-f: 1
    assert got["pass_k"]["3"]["method"] == "t over 6 cases, 95%"
    assert got["refusal_accuracy"]["estimate"] == 1.0
    assert got["refusal_accuracy"]["cases"] == 2
    cost = got["cost_per_solved_usd"]
    assert cost["estimate"] == pytest.approx(0.18 / 3)  # 18 trials' cost over 3 solved cases
    assert "bootstrap over 6 cases (2000 resamples, seed 0)" in cost["method"]
    assert cost["low"] <= cost["estimate"] <= cost["high"]
    p50 = got["latency_s"]["p50"]
    assert p50["estimate"] == pytest.approx(3.5)
    assert run_intervals(trials()) == got  # seeded: the same records, the same intervals


def test_bootstrap_over_cases_resamples_whole_cases() -> None:
    """Two cases whose trials always agree: every resample draws whole cases, so the mean is
    one of 0, 0.5 or 1 and never a mixture inside a case."""
    got = bootstrap_over_cases([[0.0] * 5, [1.0] * 5], lambda v, _: float(np.mean(v)), "")
    assert got.estimate == 0.5
    assert (got.low, got.high) == (0.0, 1.0)
    single = bootstrap_over_cases([[2.0, 3.0]], lambda v, _: float(np.mean(v)), "")
    assert (single.low, single.high, single.method) == (None, None, "no interval from one case")


def test_terminal_summary_and_junit_carry_the_intervals() -> None:
    records = trials()
    lines = summary_lines(Counter(r["outcome"] for r in records), Path("results/x"), records)
    assert "backintel: pass rate 83.3% [" in "\n".join(lines)
    assert any(x.startswith("backintel: pass^k k=1 0.83 [") for x in lines)
    assert "cluster-robust over cases with several" in lines[-2]
    props = dict(junit_run_properties(records))
    assert props["backintel_pass_rate_method"] == "cluster-robust over 6 cases, 95%"
    assert props["backintel_pass_rate_method[regression]"].startswith("Wilson over 3 cases")


def test_the_workbook_has_the_bounds_beside_every_pass_rate(tmp_path: Path) -> None:
    folder = write_run(tmp_path / "w", header("w", trials=3), trials())
    book = load_workbook(build_report(folder).workbook)
    rows = [[c.value for c in row] for row in book["summary"].iter_rows()]
    head = next(r for r in rows if r[0] == "split")
    assert head[-3:] == ["95% low", "95% high", "method"]
    dev = next(r for r in rows if r[0] == "development")
    assert dev[-1] == "Wilson over 3 cases (every case alike: no spread to cluster), 95%"
    assert dev[-3] < 2 / 3 < dev[-2]
    assert any(r[0] == "pass^k (development)" for r in rows)
