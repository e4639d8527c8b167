"""Calibration analysts: each drives the real agent and tools and produces its expected output."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from analyst import calibration
from analyst.calibration import CalibrationError, perturb_value, plain_cell
from pytest_backintel.analyst_api import (
    Analyst,
    AnalystConfig,
    AnalystLimits,
    AnalystRun,
    AnalystTask,
    CalibrationKey,
)
from pytest_backintel.contract import AnalystAnswer, Refusal
from pytest_backintel.scenario import ColumnSpec, MetricKind, MetricSpec
from pytest_backintel.tolerance import compare_metric, compare_scalar, tolerance_for
from stores.base import DatasetFiles, ProvisionedStore
from stores.sqlite.store import SQLiteStore

CONFIG = AnalystConfig()
SCALAR_SQL = (
    "SELECT COUNT(*) AS delivered_orders, SUM(amount) AS revenue,"
    " AVG(amount) / 10 AS mean_share, MIN(status) AS first_status"
    " FROM orders WHERE status = 'delivered'"
)
SCALAR_KINDS = {
    "delivered_orders": "count",
    "revenue": "currency",
    "mean_share": "ratio",
    "first_status": "text",
}
TABLE_SQL = (
    "SELECT status, COUNT(*) AS n, SUM(amount) AS revenue"
    " FROM orders GROUP BY status ORDER BY status"
)
TABLE_SPEC = MetricSpec(
    name="by_status",
    kind=MetricKind.TABLE,
    unit="rows",
    columns=[
        ColumnSpec(name="status", kind="text"),
        ColumnSpec(name="n", kind="count"),
        ColumnSpec(name="revenue", kind="currency"),
    ],
    key=["status"],
)


def key_for(check_sql: str | None, kinds: dict[str, str], concepts: list[str]) -> CalibrationKey:
    return CalibrationKey(
        check_sql=check_sql,
        metric_units={n: "unit-" + n for n in kinds},
        metric_kinds=kinds,
        tolerances={n: tolerance_for(k) for n, k in kinds.items()},
        refusal_concepts=concepts,
        forbidden_metric=None if check_sql else next(iter(kinds)),
    )


SCALAR_KEY = key_for(SCALAR_SQL, SCALAR_KINDS, [])
TABLE_KEY = key_for(TABLE_SQL, {"by_status": "table"}, [])
UNANSWERABLE_KEY = key_for(None, {"net_profit": "currency"}, ["expense ledger", "cost of goods"])


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ProvisionedStore]:
    """Three delivered orders; `a_events` (listed first) has two rows, so COUNT(*) + 1 over it
    equals the true delivered count and the unsupported analyst must step further."""
    db = tmp_path / "shop.sqlite"
    conn = sqlite3.connect(db)
    conn.executescript(
        "CREATE TABLE a_events (id INTEGER);"
        "INSERT INTO a_events VALUES (1), (2);"
        "CREATE TABLE orders (id INTEGER, status TEXT, amount REAL);"
        "INSERT INTO orders VALUES (1, 'delivered', 0.1), (2, 'delivered', 0.2),"
        " (3, 'delivered', 1234.567), (4, 'canceled', 7.0), (5, 'shipped', 2.5);"
    )
    conn.commit()
    conn.close()
    backend = SQLiteStore(tmp_path / "stores")
    yield backend.provision(DatasetFiles("shop", tmp_path, sqlite_path=db))
    backend.teardown_session()


def ask(analyst: Analyst, store: ProvisionedStore, key: CalibrationKey | None) -> AnalystRun:
    task = AnalystTask("a question", store.connect, store.display_id, AnalystLimits(), key)
    return analyst.answer(task)


def rerun(store: ProvisionedStore, sql: str) -> list[dict[str, Any]]:
    with store.connect() as session:
        return [{c: plain_cell(v) for c, v in r.items()} for r in session.run_sql(sql).records()]


def reported(run: AnalystRun) -> dict[str, Any]:
    assert isinstance(run.output, AnalystAnswer)
    return {m.name: m.value for m in run.output.metrics}


def test_factories_make_labelled_calibration_analysts() -> None:
    made = [
        calibration.reference(CONFIG),
        calibration.refuse_all(CONFIG),
        calibration.perturbed(CONFIG),
        calibration.unsupported(CONFIG),
    ]
    assert all(isinstance(a, Analyst) and a.kind == "calibration" for a in made)
    assert [a.name for a in made] == ["reference", "refuse-all", "perturbed", "unsupported"]


def test_reference_answers_with_its_own_check_query_result(store: ProvisionedStore) -> None:
    run = ask(calibration.reference(CONFIG), store, SCALAR_KEY)
    truth = rerun(store, SCALAR_SQL)[0]
    got = reported(run)
    assert got == truth
    assert [type(v) for v in got.values()] == [int, float, float, str]
    assert got["revenue"] == 0.1 + 0.2 + 1234.567  # full float precision, no rounding
    assert run.error is None
    assert isinstance(run.output, AnalystAnswer)
    assert [m.unit for m in run.output.metrics] == [f"unit-{n}" for n in SCALAR_KINDS]
    (evidence,) = run.output.evidence
    assert (evidence.id, evidence.kind, evidence.code) == ("e1", "sql", SCALAR_SQL)
    assert evidence.metrics == list(SCALAR_KINDS)
    assert rerun(store, evidence.code)[0] == got
    assert [c["tool"] for c in run.tool_calls] == [
        "list_tables",
        "describe_table",
        "describe_table",
        "run_sql",
    ]
    assert (run.usage.requests, run.usage.tool_calls) == (5, 4)


def test_reference_table_metric_is_the_rows(store: ProvisionedStore) -> None:
    run = ask(calibration.reference(CONFIG), store, TABLE_KEY)
    rows = reported(run)["by_status"]
    assert rows == rerun(store, TABLE_SQL)
    assert compare_metric(TABLE_SPEC, rerun(store, TABLE_SQL), rows).ok


def test_reference_refuses_unanswerable_naming_the_concepts(store: ProvisionedStore) -> None:
    run = ask(calibration.reference(CONFIG), store, UNANSWERABLE_KEY)
    assert isinstance(run.output, Refusal)
    assert run.output.missing == ["expense ledger", "cost of goods"]
    assert "expense ledger" in run.output.explanation
    assert "cost of goods" in run.output.explanation
    tools = [c["tool"] for c in run.tool_calls]
    assert tools == ["list_tables", "describe_table", "describe_table"]


def test_refuse_all_refuses_answerable_and_unanswerable(store: ProvisionedStore) -> None:
    answerable = ask(calibration.refuse_all(CONFIG), store, SCALAR_KEY)
    assert isinstance(answerable.output, Refusal)
    assert answerable.output.missing == ["the data needed to answer"]
    assert answerable.tool_calls == [{"tool": "list_tables", "args": {}}]
    unanswerable = ask(calibration.refuse_all(CONFIG), store, UNANSWERABLE_KEY)
    assert isinstance(unanswerable.output, Refusal)
    assert unanswerable.output.missing == ["expense ledger", "cost of goods"]
    assert "expense ledger" in unanswerable.output.explanation


def test_perturbed_misses_every_value_by_more_than_its_tolerance(store: ProvisionedStore) -> None:
    run = ask(calibration.perturbed(CONFIG), store, SCALAR_KEY)
    truth = rerun(store, SCALAR_SQL)[0]
    for name, value in reported(run).items():
        kind = SCALAR_KINDS[name]
        assert not compare_scalar(kind, truth[name], value).ok, name
        assert compare_scalar(kind, truth[name], truth[name]).ok
    assert isinstance(run.output, AnalystAnswer)
    assert run.output.evidence[0].code == SCALAR_SQL


def test_perturbed_table_changes_every_row(store: ProvisionedStore) -> None:
    run = ask(calibration.perturbed(CONFIG), store, TABLE_KEY)
    truth = rerun(store, TABLE_SQL)
    rows = reported(run)["by_status"]
    assert len(rows) == len(truth)
    assert all(got != want for got, want in zip(rows, truth, strict=True))
    assert not compare_metric(TABLE_SPEC, truth, rows).ok


def test_unsupported_cites_evidence_that_does_not_reproduce(store: ProvisionedStore) -> None:
    run = ask(calibration.unsupported(CONFIG), store, SCALAR_KEY)
    truth = rerun(store, SCALAR_SQL)[0]
    assert reported(run) == truth
    assert isinstance(run.output, AnalystAnswer)
    (evidence,) = run.output.evidence
    assert evidence.metrics == list(SCALAR_KINDS)
    cited = rerun(store, evidence.code)[0]
    assert set(cited) == set(SCALAR_KINDS)
    for name, kind in SCALAR_KINDS.items():
        assert not compare_scalar(kind, truth[name], cited[name]).ok, name
    # COUNT(*) + 1 over a_events equals the 3 delivered orders, so it stepped to + 2
    assert "COUNT(*) + 2" in evidence.code
    assert '"a_events"' in evidence.code


def test_unsupported_table_evidence_returns_other_rows(store: ProvisionedStore) -> None:
    run = ask(calibration.unsupported(CONFIG), store, TABLE_KEY)
    truth = rerun(store, TABLE_SQL)
    assert reported(run)["by_status"] == truth
    assert isinstance(run.output, AnalystAnswer)
    cited = rerun(store, run.output.evidence[0].code)
    assert cited
    assert set(cited[0]) == set(truth[0])
    assert not compare_metric(TABLE_SPEC, cited, truth).ok


def test_unsupported_table_evidence_for_an_empty_table(store: ProvisionedStore) -> None:
    empty_sql = "SELECT status, COUNT(*) AS n FROM orders WHERE status = 'lost' GROUP BY status"
    key = key_for(empty_sql, {"by_status": "table"}, [])
    run = ask(calibration.unsupported(CONFIG), store, key)
    assert reported(run)["by_status"] == []
    assert isinstance(run.output, AnalystAnswer)
    assert rerun(store, run.output.evidence[0].code) == [{"status": 1, "n": 1}]


def test_without_a_calibration_key_the_analyst_says_so(store: ProvisionedStore) -> None:
    with pytest.raises(CalibrationError, match=r"task\.calibration"):
        ask(calibration.reference(CONFIG), store, None)


@pytest.mark.parametrize(
    ("sql", "match"),
    [
        ("SELECT nope FROM orders", "query failed: ERROR"),
        ("SELECT id AS delivered_orders FROM orders", "returned 5 rows"),
        ("SELECT 1 AS something_else", "no column for metric"),
    ],
)
def test_a_check_query_the_script_cannot_use_is_an_error(
    store: ProvisionedStore, sql: str, match: str
) -> None:
    key = key_for(sql, {"delivered_orders": "count"}, [])
    with pytest.raises(CalibrationError, match=match):
        ask(calibration.reference(CONFIG), store, key)


def test_the_same_analyst_answers_several_tasks(store: ProvisionedStore) -> None:
    analyst = calibration.reference(CONFIG)
    first, second = ask(analyst, store, SCALAR_KEY), ask(analyst, store, TABLE_KEY)
    assert reported(first) != reported(second)
    other = replace(
        SCALAR_KEY,
        check_sql="SELECT 1 AS delivered_orders, 2.5 AS revenue,"
        " 0.5 AS mean_share, 'x' AS first_status",
    )
    assert reported(ask(analyst, store, other))["revenue"] == 2.5


# -- perturbation as a property ---------------------------------------------------------------

floats = st.floats(allow_nan=False, allow_infinity=False)


@given(floats | st.integers(), st.sampled_from(["currency", "ratio", "duration"]))
def test_perturbed_numbers_are_always_rejected(value: float, kind: str) -> None:
    moved = perturb_value(value, kind, tolerance_for(kind))
    assert isinstance(moved, float)
    assert math.isfinite(moved)
    assert not compare_scalar(kind, value, moved).ok


@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_perturbed_counts_are_always_rejected(value: int) -> None:
    moved = perturb_value(value, "count", 0.0)
    assert moved == value + 1
    assert not compare_scalar("count", value, moved).ok


@given(st.text())
def test_perturbed_text_is_always_rejected(value: str) -> None:
    assert not compare_scalar("text", value, perturb_value(value, "text", 0.0)).ok


def test_perturbed_null_becomes_a_value() -> None:
    assert not compare_scalar("count", None, perturb_value(None, "count", 0.0)).ok
    assert not compare_scalar("text", None, perturb_value(None, "text", 0.0)).ok


def test_plain_cell_keeps_numbers_exact() -> None:
    from datetime import date
    from decimal import Decimal

    assert plain_cell(Decimal("12")) == 12
    assert type(plain_cell(Decimal("12"))) is int
    assert plain_cell(Decimal("0.1")) == 0.1
    assert plain_cell(True) == 1
    assert plain_cell(date(2018, 3, 1)) == "2018-03-01"
    assert plain_cell(2**70) == 2**70
