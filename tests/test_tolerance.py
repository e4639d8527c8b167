"""Tolerance rules at their boundaries: each rule accepts inside and rejects just outside."""

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_backintel.scenario import ColumnSpec, MetricKind, MetricSpec
from pytest_backintel.tolerance import compare_metric, compare_scalar

finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False)
cents = st.integers(min_value=-(10**11), max_value=10**11)


@given(cents)
def test_currency_accepts_half_a_cent_and_rejects_beyond(minor: int) -> None:
    exact = Decimal(minor) / 100
    assert compare_scalar("currency", float(exact), float(exact + Decimal("0.004"))).ok
    assert compare_scalar("currency", float(exact), float(exact - Decimal("0.0049"))).ok
    assert not compare_scalar("currency", float(exact), float(exact + Decimal("0.0051"))).ok
    assert not compare_scalar("currency", float(exact), float(exact - Decimal("0.006"))).ok


@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=1, max_value=10**6))
def test_ratio_six_decimals_of_a_recurring_fraction_pass(num: int, den: int) -> None:
    exact = num / den
    assert compare_scalar("ratio", exact, round(exact, 6)).ok
    assert not compare_scalar("ratio", exact, exact + 2.5e-6).ok
    assert compare_scalar("duration", exact, round(exact, 6)).ok


@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_counts_are_exact(n: int) -> None:
    assert compare_scalar("count", n, n).ok
    assert compare_scalar("count", n, float(n)).ok if abs(n) < 2**53 else True
    assert not compare_scalar("count", n, n + 1).ok
    assert not compare_scalar("count", n, n + 0.5).ok


@given(finite.filter(lambda x: abs(x) > 0.01))
def test_signs_are_never_dropped(x: float) -> None:
    assert not compare_scalar("currency", x, -x).ok


@pytest.mark.parametrize("kind", ["count", "currency", "ratio", "duration"])
@pytest.mark.parametrize("got", ["12", "12 BRL", "1,234", True, None, float("nan")])
def test_no_number_is_read_out_of_strings_and_null_is_not_zero(kind: str, got: object) -> None:
    expected = 1 if got is True else (0 if got is None else 12)
    assert not compare_scalar(kind, expected, got).ok


def test_null_reference_only_matches_null() -> None:
    assert compare_scalar("count", None, None).ok
    assert not compare_scalar("count", None, 0).ok


def test_text_normalisation_is_only_what_is_declared() -> None:
    assert compare_scalar("text", "Seller A", "  Seller A ", ["strip"]).ok
    assert not compare_scalar("text", "Seller A", "seller a", ["strip"]).ok
    assert compare_scalar("text", "Seller A", "seller  a", ["casefold", "collapse_whitespace"]).ok
    assert not compare_scalar("text", "Seller A", "Seller A and B", ["strip"]).ok
    assert not compare_scalar("text", "12", 12).ok


TABLE = MetricSpec(
    name="by_status",
    kind=MetricKind.TABLE,
    unit="orders",
    key=["status"],
    columns=[ColumnSpec(name="status", kind="text"), ColumnSpec(name="orders", kind="count")],
)
ROWS = [{"status": "delivered", "orders": 10}, {"status": "canceled", "orders": 2}]


def test_tables_compare_by_key_regardless_of_order() -> None:
    assert compare_metric(TABLE, ROWS, list(reversed(ROWS))).ok


@pytest.mark.parametrize(
    "bad",
    [
        ROWS[:1],
        [*ROWS, {"status": "shipped", "orders": 1}],
        [{"status": "delivered", "orders": 11}, ROWS[1]],
        [{"status": "delivered"}, ROWS[1]],
        [ROWS[0], ROWS[0]],
        "delivered 10, canceled 2",
    ],
)
def test_tables_reject_any_row_difference(bad: object) -> None:
    assert not compare_metric(TABLE, ROWS, bad).ok


def test_ordered_tables_reject_reordering() -> None:
    ordered = TABLE.model_copy(update={"ordered": True})
    assert compare_metric(ordered, ROWS, ROWS).ok
    assert not compare_metric(ordered, ROWS, list(reversed(ROWS))).ok


def test_a_table_failure_lists_missing_extra_and_changed_rows_a_few_of_each() -> None:
    got = [{"status": "delivered", "orders": 11}, {"status": "shipped", "orders": 1}]
    cmp = compare_metric(TABLE, ROWS, got)
    assert not cmp.ok
    assert cmp.detail == (
        "1 missing row(s) with key: {'status': 'canceled'}; "
        "1 extra row(s) with key: {'status': 'shipped'}; "
        "1 changed row(s): row {'status': 'delivered'}, column 'orders': expected 10, got 11 "
        "(off by 1, tolerance 0)"
    )
    many = [{"status": f"s{i}", "orders": i} for i in range(40)]
    long = compare_metric(TABLE, many, many[:2])
    assert long.detail.startswith("expected 40 rows, got 2; 38 missing row(s) with key: ")
    assert long.detail.endswith(" and 33 more")  # bounded: five shown
    ordered = TABLE.model_copy(update={"ordered": True})
    assert "rows out of order" in compare_metric(ordered, ROWS, list(reversed(ROWS))).detail
