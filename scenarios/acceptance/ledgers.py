"""Ledger cases: net profit with a complete, missing, partially covered or zero-result ledger.

Net profit is the owner-approved synthetic definition: revenue posted in the period less all
expenses posted in the period. The four questions share one wording, so the question never
says whether the data needed to answer it is present.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from scenarios.acceptance.model import (
    Case,
    Ids,
    Table,
    Value,
    Variant,
    add_months,
    cents,
    fmt_date,
    metric,
    month_label,
)

__all__ = ["complete_ledger", "missing_ledger", "partial_ledger", "zero_profit"]

SALES_ACCOUNTS = ("product_sales", "product_sales", "product_sales", "shipping_income")
EXPENSE_CATEGORIES = ("cogs", "freight", "marketing", "payroll", "rent", "payment_fees")
VENDORS = ("Atlas Supply", "Rapido Freight", "Clicks&Co", "Staff payroll", "Lar Imoveis", "PayFast")
EXPENSE_WORDS = [
    "expense",
    "expenses",
    "cost",
    "costs",
    "expenditure",
    "expenditures",
    "expense ledger",
    "expense ledgers",
    "ledger",
    "ledgers",
]


@dataclass
class _Ledger:
    """The rows of one ledger store being assembled."""

    v: Variant
    rng: random.Random

    def __post_init__(self) -> None:
        self.sale_ids, self.exp_ids = Ids(self.rng, "sp_"), Ids(self.rng, "xp_")
        self.order_ids = Ids(self.rng, "ord_")
        self.sales: list[tuple[str, date, str, str | None, Decimal]] = []
        self.expenses: list[tuple[str, date, str, str, Decimal]] = []
        self.coverage: list[tuple[Value, ...]] = []

    def _day(self, start: date, end: date) -> date:
        return start + timedelta(days=self.rng.randrange((end - start).days))

    def add_sales(self, start: date, end: date, count: int) -> None:
        for _ in range(count):
            account = self.rng.choice(SALES_ACCOUNTS)
            amount = (
                cents(self.rng, 40, 900) if account == "product_sales" else cents(self.rng, 8, 60)
            )
            self.sales.append(
                (self.sale_ids(), self._day(start, end), account, self.order_ids(), amount)
            )
        for _ in range(max(1, count // 8)):  # returns: negative revenue postings
            amount = -cents(self.rng, 20, 300)
            self.sales.append((self.sale_ids(), self._day(start, end), "returns", None, amount))

    def add_expenses(self, start: date, end: date, amounts: list[Decimal]) -> None:
        for amount in amounts:
            index = self.rng.randrange(len(EXPENSE_CATEGORIES))
            row = (self.exp_ids(), self._day(start, end), EXPENSE_CATEGORIES[index], VENDORS[index])
            self.expenses.append((*row, amount))

    def random_expenses(self, count: int) -> list[Decimal]:
        return [cents(self.rng, 30, 1400) for _ in range(count)]

    def cover(
        self, ledger: str, start: date, end: date, loaded_through: date | None = None
    ) -> None:
        last = end - timedelta(days=1)
        through = loaded_through or last
        status = "closed" if through == last else "open"
        self.coverage.append((ledger, fmt_date(start), fmt_date(last), status, fmt_date(through)))

    def tables(self, with_expenses: bool) -> tuple[Table, ...]:
        v = self.v
        sales = sorted(self.sales, key=lambda r: (r[1], r[0]))
        out = [
            Table(
                v.table("sales"),
                (
                    ("posting_id", "TEXT"),
                    ("posted_on", "TEXT"),
                    ("account", "TEXT"),
                    ("order_ref", "TEXT"),
                    ("amount", "REAL"),
                ),
                [(i, fmt_date(d), a, o, amt) for i, d, a, o, amt in sales],
            ),
            Table(
                v.table("coverage"),
                (
                    ("ledger", "TEXT"),
                    ("period_start", "TEXT"),
                    ("period_end", "TEXT"),
                    ("status", "TEXT"),
                    ("loaded_through", "TEXT"),
                ),
                self.coverage,
            ),
        ]
        if with_expenses:
            exp = sorted(self.expenses, key=lambda r: (r[1], r[0]))
            out.append(
                Table(
                    v.table("expenses"),
                    (
                        ("posting_id", "TEXT"),
                        ("posted_on", "TEXT"),
                        ("category", "TEXT"),
                        ("vendor", "TEXT"),
                        ("amount", "REAL"),
                    ),
                    [(i, fmt_date(d), c, vend, amt) for i, d, c, vend, amt in exp],
                )
            )
        return tuple(out)

    def revenue(self, start: date, end: date) -> Decimal:
        return sum((r[4] for r in self.sales if start <= r[1] < end), Decimal(0))

    def spend(self, start: date, end: date) -> Decimal:
        return sum((r[4] for r in self.expenses if start <= r[1] < end), Decimal(0))


def _question(v: Variant, label: str, start: date, end: date) -> str:
    last = end - timedelta(days=1)
    return (
        f"Net profit is defined as all revenue posted in the period (including negative "
        f"return postings) less all expenses posted in the same period. What was net profit "
        f"for {label} (posting dates {fmt_date(start)} to {fmt_date(last)} inclusive)? Report "
        f"metric `net_profit` in {v.currency}."
    )


def _profit_check(v: Variant, start: date, end: date) -> str:
    window = f"posted_on >= '{fmt_date(start)}' AND posted_on < '{fmt_date(end)}'"
    return (
        f"SELECT ROUND((SELECT COALESCE(SUM(amount), 0) FROM {v.table('sales')} WHERE {window})\n"
        f"  - (SELECT COALESCE(SUM(amount), 0) FROM {v.table('expenses')} WHERE {window}), 2)"
        " AS net_profit"
    )


def _three_months(v: Variant, ledger: _Ledger, target: date, expenses: bool) -> None:
    """Sales (and expenses) for the month before, the target month and the month after."""
    for offset in (-1, 0, 1):
        start, end = add_months(target, offset), add_months(target, offset + 1)
        ledger.add_sales(start, end, ledger.rng.randint(18, 26))
        ledger.cover("sales", start, end)
        if expenses:
            if offset:
                ledger.add_expenses(start, end, ledger.random_expenses(ledger.rng.randint(8, 14)))
            ledger.cover("expenses", start, end)


def _answerable(
    v: Variant, key: str, family: str, target: date, ledger: _Ledger, planting: dict[str, Any]
) -> Case:
    end = add_months(target, 1)
    profit = ledger.revenue(target, end) - ledger.spend(target, end)
    return Case(
        key=key,
        family=family,
        level=3,
        title=f"Net profit, {month_label(target)}",
        question=_question(v, month_label(target), target, end),
        tables=ledger.tables(with_expenses=True),
        conditions="Revenue and expense ledgers are both posted and closed for every month in "
        "the store, including the requested one.",
        planting={
            **planting,
            "revenue_in_period": str(ledger.revenue(target, end)),
            "expenses_in_period": str(ledger.spend(target, end)),
        },
        metrics=(metric("net_profit", "currency", v.currency, "Posted revenue less expenses."),),
        reference={"net_profit": profit},
        check_sql=_profit_check(v, target, end),
    )


def complete_ledger(v: Variant) -> list[Case]:
    """A full-period cost ledger: net profit is computable and non-zero."""
    ledger = _Ledger(v, v.rng("complete-ledger"))
    target = date(*v.pick((2024, 3), (2025, 8)), 1)
    _three_months(v, ledger, target, expenses=True)
    end = add_months(target, 1)
    ledger.add_expenses(target, end, ledger.random_expenses(ledger.rng.randint(10, 14)))
    planting = {"why": "the word profit must not trigger a refusal when both ledgers are complete"}
    return [_answerable(v, "complete-ledger", "full_period_cost_ledger", target, ledger, planting)]


def zero_profit(v: Variant) -> list[Case]:
    """Complete ledgers whose expenses equal revenue exactly in the requested month."""
    rng = v.rng("zero-profit")
    ledger = _Ledger(v, rng)
    target = date(*v.pick((2024, 6), (2025, 2)), 1)
    _three_months(v, ledger, target, expenses=True)
    end = add_months(target, 1)
    revenue = ledger.revenue(target, end)
    count = rng.randint(9, 13)
    share = revenue * Decimal("0.85") / (count - 1)
    amounts = [
        (share * Decimal(rng.randint(70, 130)) / 100).quantize(Decimal("0.01"))
        for _ in range(count - 1)
    ]
    amounts.append(revenue - sum(amounts, Decimal(0)))
    if amounts[-1] <= 0:
        raise ValueError("zero-profit: the balancing expense is not positive")
    ledger.add_expenses(target, end, amounts)
    planting = {"why": "zero is a computed result with complete data, not a missing value"}
    case = _answerable(v, "zero-profit", "zero_net_profit", target, ledger, planting)
    if case.reference != {"net_profit": Decimal(0)}:
        raise ValueError(f"zero-profit: planted profit is {case.reference}, not 0")
    return [case]


def missing_ledger(v: Variant) -> list[Case]:
    """Revenue postings and revenue-ledger coverage only: no expense records at all."""
    ledger = _Ledger(v, v.rng("missing-ledger"))
    target = date(*v.pick((2024, 5), (2025, 4)), 1)
    _three_months(v, ledger, target, expenses=False)
    end = add_months(target, 1)
    condition = (
        f"The store holds revenue postings and revenue-ledger coverage only; no expense or cost "
        f"records exist for {month_label(target)} or any other period, so net profit (revenue "
        "less expenses) cannot be computed, and revenue must not be reported as profit."
    )
    return [
        Case(
            key="missing-ledger",
            family="missing_expense_ledger",
            level=3,
            title=f"Net profit, {month_label(target)}",
            question=_question(v, month_label(target), target, end),
            tables=ledger.tables(with_expenses=False),
            conditions=condition,
            planting={
                "omitted": "the expense ledger table and its coverage records",
                "revenue_in_period": str(ledger.revenue(target, end)),
                "why": "reporting revenue (or an invented margin) as profit is an invented value",
            },
            refusal={
                "must_name": [EXPENSE_WORDS],
                "forbidden_metric": "net_profit",
                "conditions": condition,
            },
        )
    ]


def partial_ledger(v: Variant) -> list[Case]:
    """A quarter whose expense ledger is loaded for two months and three days of the third."""
    rng = v.rng("partial-ledger")
    ledger = _Ledger(v, rng)
    quarter = date(*v.pick((2024, 1), (2025, 7)), 1)
    gap_offset = v.pick(2, 1)  # development: last month missing; reserved: middle month
    end = add_months(quarter, 3)
    ledger.add_sales(add_months(quarter, -1), quarter, rng.randint(15, 20))
    ledger.add_expenses(add_months(quarter, -1), quarter, ledger.random_expenses(9))
    ledger.cover("sales", add_months(quarter, -1), quarter)
    ledger.cover("expenses", add_months(quarter, -1), quarter)
    for offset in range(3):
        start, stop = add_months(quarter, offset), add_months(quarter, offset + 1)
        ledger.add_sales(start, stop, rng.randint(18, 26))
        ledger.cover("sales", start, stop)
        if offset == gap_offset:
            through = start + timedelta(days=2)
            ledger.add_expenses(start, through + timedelta(days=1), ledger.random_expenses(3))
            ledger.cover("expenses", start, stop, loaded_through=through)
        else:
            ledger.add_expenses(start, stop, ledger.random_expenses(rng.randint(10, 14)))
            ledger.cover("expenses", start, stop)
    gap = add_months(quarter, gap_offset)
    label = f"Q{(quarter.month - 1) // 3 + 1} {quarter.year}"
    condition = (
        f"The expense ledger for {label} is loaded and closed only for the other two months; "
        f"for {month_label(gap)} it is open and loaded through {fmt_date(gap + timedelta(days=2))}"
        " only, so full-quarter expenses, and hence net profit, are unknown."
    )
    month = gap.strftime("%B").lower()
    gap_words = [f"{month} {gap.year}", gap.strftime("%Y-%m")]
    if month != "may":  # the bare word "may" would match the modal verb
        gap_words.insert(0, month)
    coverage_words = [
        "coverage",
        "covered",
        "incomplete",
        "partial",
        "partially",
        "missing",
        "open",
        "gap",
        "loaded",
    ]
    naive = ledger.revenue(quarter, end) - ledger.spend(quarter, end)
    return [
        Case(
            key="partial-ledger",
            family="partially_covered_expense_ledger",
            level=3,
            title=f"Net profit, {label}",
            question=_question(v, label, quarter, end),
            tables=ledger.tables(with_expenses=True),
            conditions=condition,
            planting={
                "gap_month": gap.strftime("%Y-%m"),
                "expense_rows_in_gap_month": 3,
                "naive_profit_over_loaded_rows": str(naive),
                "why": "summing the loaded rows gives a plausible but overstated profit",
            },
            refusal={
                "must_name": [EXPENSE_WORDS, gap_words, coverage_words],
                "forbidden_metric": "net_profit",
                "conditions": condition,
            },
        )
    ]
