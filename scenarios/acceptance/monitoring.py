"""Delivery-monitoring replay cases: stable/shifted delivery, delayed observations and their
follow-up snapshot, a duplicated shipment export, and an entirely unobserved current period.

Every case compares a current purchase cohort with a baseline cohort under one stated rule:
a material alert is raised when the current mean delivery time exceeds the baseline mean by
more than 20% of the baseline mean. Only deliveries observed by the extract time count.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from fractions import Fraction
from typing import Any

from scenarios.acceptance.model import (
    Case,
    Ids,
    Table,
    Value,
    Variant,
    add_months,
    day_seconds,
    fmt_ts,
    mean_days,
    metric,
    midnight,
    month_label,
    ts_window,
)

__all__ = [
    "RULE",
    "Order",
    "cohort",
    "draw",
    "monitor_check",
    "monitor_metrics",
    "monitor_question",
    "monitor_reference",
    "observed_mean",
    "orders_table",
    "snapshot",
    "span",
    "stable_and_shifted",
]

RULE = Fraction(6, 5)
"""Alert when current mean > 1.2 x baseline mean."""


@dataclass(frozen=True)
class Order:
    order_id: str
    purchased: datetime
    delivered: datetime | None
    status: str = "delivered"


def draw(rng: random.Random, ids: Ids, lo: date, hi: date, n: int, scale: float) -> list[Order]:
    out = []
    for _ in range(n):
        bought = day_seconds(rng, lo, hi)
        secs = int(rng.uniform(2.0, 11.0) * scale * 86400)
        out.append(Order(ids(), bought, bought + timedelta(seconds=secs)))
    return out


def cohort(orders: list[Order], lo: date, hi: date) -> list[Order]:
    a, b = midnight(lo), midnight(hi)
    return [o for o in orders if a <= o.purchased < b]


def observed_mean(cohort: list[Order]) -> Fraction:
    return mean_days([(o.purchased, o.delivered) for o in cohort if o.delivered])


def snapshot(orders: list[Order], cutoff: datetime) -> list[Order]:
    """What an extract taken at `cutoff` shows: later purchases absent, later deliveries hidden."""
    out = []
    for o in orders:
        if o.purchased >= cutoff:
            continue
        if o.delivered is not None and o.delivered >= cutoff:
            o = Order(o.order_id, o.purchased, None, "shipped")
        out.append(o)
    return out


def orders_table(v: Variant, orders: list[Order]) -> Table:
    rows: list[tuple[Value, ...]] = [
        (o.order_id, o.status, fmt_ts(o.purchased), fmt_ts(o.delivered) if o.delivered else None)
        for o in sorted(orders, key=lambda o: (o.purchased, o.order_id))
    ]
    columns = (
        ("order_id", "TEXT"),
        ("order_status", "TEXT"),
        ("purchased_at", "TEXT"),
        ("delivered_at", "TEXT"),
    )
    return Table(v.table("orders"), columns, rows)


def span(lo: date, hi: date) -> str:
    a, b = ts_window(lo, hi)
    return f"from {a} up to but not including {b}"


def monitor_question(
    cutoff: datetime, base: tuple[date, date], cur: tuple[date, date], extra: tuple[str, ...]
) -> str:
    """The shared monitoring question; `extra` adds metric descriptions to the report list."""
    wanted = (
        "`baseline_mean_delivery_days` (days)",
        "`current_mean_delivery_days` (days)",
        "`material_alert` ('yes' or 'no')",
        *extra,
    )
    return (
        f"Delivery monitoring on the extract taken at {fmt_ts(cutoff)}. The baseline cohort is "
        f"the orders purchased {span(*base)}; the current cohort is the orders purchased "
        f"{span(*cur)}. Delivery time is the exact elapsed time from purchase to delivery in "
        "fractional days (seconds / 86400), averaged over the cohort's orders with status "
        "`delivered` and a recorded delivery timestamp. A material alert is raised when the "
        "current mean exceeds the baseline mean by more than 20% of the baseline mean. Report "
        f"each metric exactly once: {'; '.join(wanted)}."
    )


def monitor_check(
    table: str, base: tuple[date, date], cur: tuple[date, date], pending: bool
) -> str:
    def mean(lo: date, hi: date) -> str:
        return (
            "(SELECT AVG((CAST(strftime('%s', delivered_at) AS INTEGER) - CAST(strftime('%s', "
            f"purchased_at) AS INTEGER)) / 86400.0) FROM {table} WHERE order_status = 'delivered'"
            f" AND delivered_at IS NOT NULL AND purchased_at >= '{fmt_ts(midnight(lo))}'"
            f" AND purchased_at < '{fmt_ts(midnight(hi))}')"
        )

    cur_window = (
        f"purchased_at >= '{fmt_ts(midnight(cur[0]))}' AND purchased_at < "
        f"'{fmt_ts(midnight(cur[1]))}'"
    )
    extra = ""
    if pending:
        extra = (
            f",\n  (SELECT COUNT(*) FROM {table} WHERE {cur_window} AND order_status = "
            "'delivered' AND delivered_at IS NOT NULL) AS current_delivered_orders,\n"
            f"  (SELECT COUNT(*) FROM {table} WHERE {cur_window} AND order_status NOT IN "
            "('delivered', 'canceled')) AS current_pending_orders"
        )
    return (
        f"SELECT b AS baseline_mean_delivery_days, c AS current_mean_delivery_days,\n"
        f"  CASE WHEN c > 1.2 * b THEN 'yes' ELSE 'no' END AS material_alert{extra}\n"
        f"FROM (SELECT {mean(*base)} AS b, {mean(*cur)} AS c)"
    )


def monitor_metrics(pending: bool) -> tuple[dict[str, Any], ...]:
    out = [
        metric("baseline_mean_delivery_days", "duration", "days", "Baseline cohort mean."),
        metric("current_mean_delivery_days", "duration", "days", "Current cohort mean."),
        metric("material_alert", "text", "yes/no", "Current mean > 1.2 x baseline mean."),
    ]
    if pending:
        out += [
            metric("current_delivered_orders", "count", "orders", "Observed current deliveries."),
            metric("current_pending_orders", "count", "orders", "Current orders still pending."),
        ]
    return tuple(out)


def monitor_reference(base: list[Order], cur: list[Order], pending: bool) -> dict[str, Any]:
    b, c = observed_mean(base), observed_mean(cur)
    ref: dict[str, Any] = {
        "baseline_mean_delivery_days": b,
        "current_mean_delivery_days": c,
        "material_alert": "yes" if c > RULE * b else "no",
    }
    if pending:
        ref["current_delivered_orders"] = sum(1 for o in cur if o.delivered)
        ref["current_pending_orders"] = sum(
            1 for o in cur if o.status not in ("delivered", "canceled")
        )
    return ref


SHIFT_PLANS = {
    # key: (current duration scale, accepted relative change, development / reserved baseline)
    "stable-delivery": (1.0, (-0.08, 0.08), ((2024, 4), (2025, 2))),
    "shifted-delivery": (1.5, (0.3, 0.9), ((2024, 7), (2025, 10))),
}


def _shift_case(v: Variant, key: str) -> Case:
    scale, (low, high), months = SHIFT_PLANS[key]
    rng = v.rng(key)
    base_m = date(*v.pick(*months), 1)
    cur_m, after = add_months(base_m, 1), add_months(base_m, 2)
    while True:  # deterministic redraw until the planted relation holds with a margin
        ids = Ids(rng, "o_")
        base = draw(rng, ids, base_m, cur_m, 30, 1.0)
        for i in range(4):  # late-month baseline purchases delivered in the current month
            bought = midnight(cur_m) - timedelta(seconds=rng.randint(3600, 3 * 86400))
            slow = bought + timedelta(days=rng.randint(14, 19))
            base[i] = Order(base[i].order_id, bought, slow)
        cur = draw(rng, ids, cur_m, after, 42, scale)
        canceled = [
            Order(ids(), day_seconds(rng, cur_m, after), None, "canceled") for _ in range(3)
        ]
        rel = observed_mean(cur) / observed_mean(base) - 1
        if low < rel < high:
            break
    window = (midnight(cur_m), midnight(after))
    by_delivery = [
        (o.purchased, o.delivered)
        for o in base + cur
        if o.delivered and window[0] <= o.delivered < window[1]
    ]
    return Case(
        key=key,
        family="stable_shifted_delivery",
        level=6,
        title=f"Delivery monitoring, {month_label(cur_m)} vs {month_label(base_m)}",
        question=monitor_question(
            midnight(after) + timedelta(days=21), (base_m, cur_m), (cur_m, after), ()
        ),
        tables=(orders_table(v, base + cur + canceled),),
        conditions="Both cohorts are fully observed at the extract time.",
        planting={
            "current_duration_scale": scale,
            "relative_change": float(rel),
            "baseline_orders_delivered_in_current_month": [o.order_id for o in base[:4]],
            "naive_delivery_month_mean": float(mean_days(by_delivery)),
            "why": "stable: no false alarm (cohorts by purchase time; canceled orders have no "
            "duration); shifted: the rule must fire",
        },
        metrics=monitor_metrics(pending=False),
        reference=monitor_reference(base, cur, pending=False),
        check_sql=monitor_check(v.table("orders"), (base_m, cur_m), (cur_m, after), pending=False),
    )


def stable_and_shifted(v: Variant) -> list[Case]:
    """Two monthly comparisons: one stable (no alert) and one with a real shift (alert)."""
    return [_shift_case(v, "stable-delivery"), _shift_case(v, "shifted-delivery")]
