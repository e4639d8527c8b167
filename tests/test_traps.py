"""Traps other benchmarks fell into, each as a property: shown to catch a deliberately lenient
variant of the check (the trap) and to hold for ours.

- Spider 2.0 matched tables column by column: rows scrambled across columns passed.
- tau2-bench passed a task whose criteria were empty.
- BIRD shipped gold SQL that did not execute.
- NULL read as zero; an amount in cents reported where dollars are asked.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlglot
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pytest_backintel.contract import AnalystAnswer, MetricValue, Refusal
from pytest_backintel.outcomes import Outcome
from pytest_backintel.scenario import MetricSpec, Scenario
from pytest_backintel.scoring.score import score_answer
from pytest_backintel.tolerance import compare_metric

TABLE = MetricSpec.model_validate(
    {
        "name": "by_country",
        "kind": "table",
        "unit": "rows",
        "columns": [{"name": "country", "kind": "text"}, {"name": "revenue", "kind": "currency"}],
        "key": ["country"],
    }
)
USD = MetricSpec.model_validate({"name": "spend", "kind": "currency", "unit": "USD"})
COUNT = MetricSpec.model_validate({"name": "orders", "kind": "count", "unit": "orders"})


# -- 1. a table right column by column, rows scrambled -----------------------------------


def columnwise(expected: list[dict[str, Any]], got: list[dict[str, Any]]) -> bool:
    """The lenient check: each column's values match as a multiset (Spider 2.0's matching)."""
    return all(
        Counter(r[c] for r in expected) == Counter(r.get(c) for r in got)
        for c in expected[0]
    )  # fmt: skip


@st.composite
def scrambled(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A keyed table and the same columns with the revenue values moved to other rows."""
    countries = draw(st.lists(st.text("ABCDEFGHIJ", min_size=2, max_size=2), min_size=2,
                              max_size=8, unique=True))  # fmt: skip
    revenues = draw(st.lists(st.integers(0, 10**6), min_size=len(countries),
                             max_size=len(countries), unique=True))  # fmt: skip
    moved = draw(st.permutations(revenues))
    assume(list(moved) != list(revenues))
    expected = [
        {"country": c, "revenue": r / 100} for c, r in zip(countries, revenues, strict=True)
    ]
    got = [{"country": c, "revenue": r / 100} for c, r in zip(countries, moved, strict=True)]
    return expected, got


@given(scrambled())
def test_rows_scrambled_across_columns_fail(tables: tuple[list[Any], list[Any]]) -> None:
    expected, got = tables
    assert columnwise(expected, got)  # the trap: the lenient check passes it
    found = compare_metric(TABLE, expected, got)
    assert not found.ok
    assert "changed" in found.detail
    assert compare_metric(TABLE, expected, expected).ok  # and ours passes the right one


# -- 2. a scenario with no checks ----------------------------------------------------------

BASE = {"id": "x", "version": 1, "title": "t", "question": "How many orders?",
        "dataset": {"world": "olist"}, "split": "development", "level": 1,
        "family": "f"}  # fmt: skip


def all_checks_pass(scenario: Scenario, answer: AnalystAnswer) -> bool:
    """The lenient scorer: every declared check passes (vacuously true with none)."""
    return all(m.name in {v.name for v in answer.metrics} for m in scenario.metrics)


@given(st.lists(st.builds(MetricValue, name=st.text(min_size=1, max_size=8),
                          value=st.integers() | st.floats(allow_nan=False) | st.text()),
                max_size=3))  # fmt: skip
def test_a_scenario_without_checks_passes_nothing(metrics: list[MetricValue]) -> None:
    fields = BASE | {"answerable": True, "metrics": [], "check_sql": "SELECT 1"}
    empty = Scenario.model_construct(**fields)  # as a loader that skipped validation has it
    answer = AnalystAnswer(metrics=metrics, evidence=[])
    assert all_checks_pass(empty, answer)  # the trap
    assert score_answer(empty, answer, [], {}).outcome is not Outcome.PASS
    from pytest_backintel.scenario import RefusalSpec

    criteria = RefusalSpec.model_construct(must_name=[], forbidden_metric="m", conditions="c")
    refusal = Scenario.model_construct(
        **(BASE | {"answerable": False, "metrics": [], "refusal": criteria})
    )
    said = Refusal(missing=["anything"], explanation="no")
    assert score_answer(refusal, said, [], {}).outcome is not Outcome.PASS
    with pytest.raises(ValueError, match="at least one metric"):
        Scenario.model_validate(fields)  # `validate` (and collection) reject it


def test_validate_rejects_a_scenario_file_without_checks(tmp_path: Path) -> None:
    path = tmp_path / "empty.scenario.yaml"
    path.write_text(
        "id: empty\nversion: 1\ntitle: t\nquestion: q\ndataset: {world: olist}\n"
        "split: development\nlevel: 1\nfamily: f\nanswerable: true\nmetrics: []\n"
        "check_sql: SELECT 1\n"
    )
    done = subprocess.run(
        [str(Path(sys.executable).parent / "backintel"), "validate", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert "empty.scenario.yaml:" in done.stderr
    assert "at least one metric" in done.stderr


# -- 3. a reference that does not execute --------------------------------------------------


def parses(sql: str) -> bool:
    """The lenient validator: the reference only has to parse (BIRD's unexecutable gold)."""
    try:
        sqlglot.parse(sql, read="sqlite")
    except sqlglot.errors.ParseError:
        return False
    return True


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from test_own_data import project

    return project(tmp_path_factory.mktemp("shop"))


@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.from_regex(r"[a-z]{3,10}_(events|ledger|spend)", fullmatch=True))
def test_a_reference_that_does_not_execute_is_a_validate_error(shop: Path, table: str) -> None:
    from pytest_backintel.collect.validate import validate_paths

    sql = f"SELECT COUNT(*) AS delivered_orders FROM {table}"
    path = shop / "scenarios" / f"broken-{table}.scenario.yaml"
    text = (shop / "scenarios" / "delivered-orders.scenario.yaml").read_text()
    path.write_text(
        text.replace("id: delivered-orders", f"id: broken-{table}")
        .replace("SELECT COUNT(*) AS delivered_orders FROM orders WHERE status = 'delivered'", sql)
        .replace("  python: refs:delivered_orders", "  # python: none")
    )
    try:
        assert parses(sql)  # the trap: it parses
        cwd = Path.cwd()
        os.chdir(shop)
        try:
            problems = validate_paths([path])
        finally:
            os.chdir(cwd)
        assert any("reference.sql: does not run on the bound" in p and table in p
                   for p in problems), problems  # fmt: skip
    finally:
        path.unlink()


# -- 4. NULL is never zero -----------------------------------------------------------------


def null_as_zero(expected: Any, got: Any) -> bool:
    """The lenient check: NULL read as 0."""
    return (expected or 0) == (got or 0)


@given(st.sampled_from([0, 0.0, -0.0]), st.booleans(), st.sampled_from([COUNT, USD]))
def test_null_never_equals_zero(zero: float, null_expected: bool, spec: MetricSpec) -> None:
    expected, got = (None, zero) if null_expected else (zero, None)
    assert null_as_zero(expected, got)  # the trap
    found = compare_metric(spec, expected, got)
    assert not found.ok
    assert "NULL" in found.detail
    assert compare_metric(spec, zero, zero).ok
    cells = [{"country": "BR", "revenue": expected}], [{"country": "BR", "revenue": got}]
    assert not compare_metric(TABLE, *cells).ok


# -- 5. cents where dollars are asked ------------------------------------------------------


def rounded_to_major(expected: Any, got: Any) -> bool:
    """The lenient check: compares digits, not magnitude (a value with its decimal point
    dropped, "12345" for 123.45, reads the same)."""
    return str(expected).replace(".", "").lstrip("0") == str(got).replace(".", "").lstrip("0")


@given(st.integers(1, 10**9))
def test_cents_where_dollars_are_asked_fail_saying_so(cents: int) -> None:
    dollars = cents / 100
    assume(str(dollars).endswith(str(cents % 10)) and not str(dollars).endswith(".0"))
    assume(len(str(dollars).split(".")[1]) == 2)
    assert rounded_to_major(dollars, cents)  # the trap
    found = compare_metric(USD, dollars, cents)
    assert not found.ok
    assert "in cents (minor units) where USD (major units) are asked" in found.detail
    assert compare_metric(USD, dollars, dollars).ok
    off = compare_metric(USD, dollars, dollars * 3)  # another wrong value says nothing of cents
    assert not off.ok
    assert "cents" not in off.detail
