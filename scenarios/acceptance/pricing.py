"""Price replay cases: a sales-mix shift with unchanged prices, and a real price change.

Definition (fixed, equal-weight within SKU): a SKU's period price is its revenue divided by its
quantity in the period; the price change is the unweighted mean over SKUs sold in both periods
of (current price / baseline price - 1); the alert fires when |change| > 0.05.
"""

from __future__ import annotations

import random
from datetime import date, timedelta
from decimal import Decimal
from fractions import Fraction

from scenarios.acceptance.model import (
    Case,
    Ids,
    Table,
    Value,
    Variant,
    add_months,
    fmt_date,
    metric,
    month_label,
)

__all__ = ["THRESHOLD", "sales_mix"]

THRESHOLD = Fraction(1, 20)
CATALOG = (
    ("Enamel mug", "kitchen", 8, 14),
    ("Cotton towel", "home", 15, 25),
    ("Desk lamp", "office", 35, 60),
    ("Running shoes", "sports", 180, 260),
    ("Espresso maker", "kitchen", 320, 420),
    ("Office chair", "office", 540, 700),
    ("Wool blanket", "home", 60, 90),
    ("Standing desk", "office", 780, 950),
)
"""The compared SKUs' products in order; the development split uses the first six."""
Line = tuple[date, str, int, Decimal]


def _split_quantity(rng: random.Random, total: int) -> list[int]:
    out = []
    while total > 0:
        q = min(total, rng.randint(1, 5))
        out.append(q)
        total -= q
    return out


def _sell(rng: random.Random, sku: str, qty: int, price: Decimal, lo: date, hi: date) -> list[Line]:
    span = (hi - lo).days
    return [
        (lo + timedelta(days=rng.randrange(span)), sku, q, price) for q in _split_quantity(rng, qty)
    ]


def _price(lines: list[Line], sku: str, lo: date, hi: date) -> Fraction | None:
    mine = [(q, p) for d, s, q, p in lines if s == sku and lo <= d < hi]
    qty = sum(q for q, _ in mine)
    return Fraction(sum(q * p for q, p in mine)) / qty if qty else None


def _naive(lines: list[Line], lo: date, hi: date) -> Fraction:
    mine = [(q, p) for d, _, q, p in lines if lo <= d < hi]
    return Fraction(sum(q * p for q, p in mine)) / sum(q for q, _ in mine)


def _draw(
    rng: random.Random, skus: list[str], mix_only: bool, b0: date, c0: date, a0: date
) -> tuple[list[Line], dict[str, str]]:
    """Sales of the compared SKUs `skus[:-2]`, a launched SKU and a discontinued one."""
    n = len(skus) - 2
    prices = {
        sku: Decimal(rng.randint(lo * 100, hi * 100)).scaleb(-2)
        for sku, (_, _, lo, hi) in zip(skus[:n], CATALOG[:n], strict=True)
    }
    lines: list[Line] = []
    changes: dict[str, str] = {}
    raised = set(rng.sample(skus[:n], 4)) if not mix_only else set()
    staged = min(raised) if raised else None
    for i, sku in enumerate(skus[:n]):
        cheap = i < n // 2
        base_q = rng.randint(40, 60) if cheap else rng.randint(6, 12)
        if mix_only:
            cur_q = rng.randint(10, 18) if cheap else rng.randint(25, 40)
        else:
            cur_q = max(2, round(base_q * rng.uniform(0.85, 1.15)))
        lines += _sell(rng, sku, rng.randint(5, 15), prices[sku], add_months(b0, -1), b0)
        lines += _sell(rng, sku, base_q, prices[sku], b0, c0)
        new = prices[sku]
        if sku in raised:
            new = (prices[sku] * Decimal(rng.randint(108, 116)) / 100).quantize(Decimal("0.01"))
            changes[sku] = f"{prices[sku]} -> {new}"
        if sku == staged:  # the new price applies from the 15th: the month price is a blend
            mid = c0 + timedelta(days=14)
            lines += _sell(rng, sku, cur_q // 2, prices[sku], c0, mid)
            lines += _sell(rng, sku, cur_q - cur_q // 2, new, mid, a0)
            changes[sku] += f" from {fmt_date(mid)}"
        else:
            lines += _sell(rng, sku, cur_q, new, c0, a0)
    lines += _sell(rng, skus[n], 9, Decimal("799.00"), c0, a0)  # launched in the current month
    lines += _sell(rng, skus[n + 1], 30, Decimal("4.50"), b0, c0)  # discontinued after baseline
    return lines, changes


def sales_mix(v: Variant) -> list[Case]:
    """Mix-only (no alert, change exactly 0) and an actual price change (alert)."""
    cases = []
    for key, mix_only, months in (
        ("mix-only-prices", True, ((2024, 10), (2025, 4))),
        ("actual-price-change", False, ((2024, 8), (2025, 12))),
    ):
        rng = v.rng(key)
        b0 = date(*v.pick(*months), 1)
        c0, a0 = add_months(b0, 1), add_months(b0, 2)
        n = v.size(key, 6, 7, len(CATALOG))
        skus = [f"SKU-{k}" for k in rng.sample(range(1000, 9999), n + 2)]
        while True:
            lines, changes = _draw(rng, skus, mix_only, b0, c0, a0)
            pairs = [(_price(lines, s, b0, c0), _price(lines, s, c0, a0)) for s in skus]
            ratios = [cur / base - 1 for base, cur in pairs if base and cur]
            change = sum(ratios, Fraction(0)) / len(ratios)
            naive = _naive(lines, c0, a0) / _naive(lines, b0, c0) - 1
            if mix_only and change == 0 and naive > Fraction(1, 5):
                break
            if not mix_only and change > Fraction(3, 50):
                break
        ids = Ids(rng, "ln_")
        rows: list[tuple[Value, ...]] = [
            (ids(), fmt_date(d), s, q, p)
            for d, s, q, p in sorted(lines, key=lambda x: (x[0], x[1], x[2]))
        ]
        t_lines, t_products = v.table("lines"), v.table("products")
        products: list[tuple[Value, ...]] = [
            (sku, name, cat) for sku, (name, cat, _, _) in zip(skus[:n], CATALOG, strict=False)
        ]
        products += [
            (skus[n], "Smart speaker", "electronics"),
            (skus[n + 1], "Paper straws", "kitchen"),
        ]
        last_b, last_c = c0 - timedelta(days=1), a0 - timedelta(days=1)
        question = (
            f"Price monitoring: the baseline period is {month_label(b0)} (sold_on {fmt_date(b0)} "
            f"to {fmt_date(last_b)}) and the current period is {month_label(c0)} (sold_on "
            f"{fmt_date(c0)} to {fmt_date(last_c)}). For each SKU sold in both periods, its period "
            "price is its revenue (quantity x unit_price summed over its sales lines) divided by "
            "its quantity sold in that period. The price change is the equal-weight (unweighted) "
            "mean over those SKUs of (current price / baseline price - 1). A material price alert "
            "is raised when the absolute price change exceeds 0.05. Report `skus_compared` (a "
            "count), `price_change` (a ratio, e.g. 0.031 for +3.1%) and `price_alert` ('yes' or "
            "'no')."
        )

        def period(lo: date, hi: date, expr: str) -> str:
            window = f"sold_on >= '{fmt_date(lo)}' AND sold_on < '{fmt_date(hi)}'"
            return f"SUM(CASE WHEN {window} THEN {expr} END)"

        check = (
            "WITH p AS (SELECT sku,\n"
            f"    {period(b0, c0, 'quantity * unit_price')} / {period(b0, c0, 'quantity')} AS bp,\n"
            f"    {period(c0, a0, 'quantity * unit_price')} / {period(c0, a0, 'quantity')} AS cp\n"
            f"  FROM {t_lines} GROUP BY sku),\n"
            "q AS (SELECT COUNT(*) AS n, AVG(cp / bp - 1) AS ch FROM p\n"
            "  WHERE bp IS NOT NULL AND cp IS NOT NULL)\n"
            "SELECT n AS skus_compared, ch AS price_change,\n"
            "  CASE WHEN ABS(ch) > 0.05 THEN 'yes' ELSE 'no' END AS price_alert FROM q"
        )
        cases.append(
            Case(
                key=key,
                family="sales_mix_price_change",
                level=6,
                title=f"Price monitoring, {month_label(c0)} vs {month_label(b0)}",
                question=question,
                tables=(
                    Table(
                        t_products,
                        (("sku", "TEXT"), ("product_name", "TEXT"), ("category", "TEXT")),
                        products,
                    ),
                    Table(
                        t_lines,
                        (
                            ("line_id", "TEXT"),
                            ("sold_on", "TEXT"),
                            ("sku", "TEXT"),
                            ("quantity", "INTEGER"),
                            ("unit_price", "REAL"),
                        ),
                        rows,
                    ),
                ),
                conditions="Complete sales lines for both periods and the month before; one SKU "
                "launched in the current period and one discontinued after the baseline.",
                planting={
                    "price_changes": changes,
                    "naive_average_price_change": float(naive),
                    "why": "mix-only: quantities shift to premium SKUs with every price unchanged, "
                    "so a naive average price rises but no price alert is due; actual: real "
                    "increases on four SKUs, one of them from mid-month (a blended month price)",
                },
                metrics=(
                    metric("skus_compared", "count", "SKUs", "SKUs sold in both periods."),
                    metric("price_change", "ratio", "ratio", "Equal-weight mean price ratio - 1."),
                    metric("price_alert", "text", "yes/no", "|price_change| > 0.05."),
                ),
                reference={
                    "skus_compared": len(ratios),
                    "price_change": change,
                    "price_alert": "yes" if abs(change) > THRESHOLD else "no",
                },
                check_sql=check,
            )
        )
    return cases
