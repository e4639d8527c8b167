"""Replay cases over scheduled extracts: delayed observations and their follow-up snapshot,
a duplicated shipment export, and a current period with no observed delivery at all."""

from __future__ import annotations

import random
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
    fmt_ts,
    metric,
    midnight,
    month_label,
    ts_window,
)
from scenarios.acceptance.monitoring import (
    RULE,
    Order,
    cohort,
    draw,
    monitor_check,
    monitor_metrics,
    monitor_question,
    monitor_reference,
    observed_mean,
    orders_table,
    snapshot,
)

__all__ = ["current_period_unobserved", "delayed_observations", "duplicate_shipments"]

DELIVERED_TEXT = "`current_delivered_orders` (count of current-cohort orders in that mean)"
PENDING_TEXT = (
    DELIVERED_TEXT,
    "`current_pending_orders` (count of current-cohort orders neither delivered nor canceled)",
)


def _arriving(
    rng: random.Random, ids: Ids, lo: date, hi: date, after: datetime, days: int
) -> Order:
    """An order purchased in [lo, hi) whose delivery happens within `days` days after `after`."""
    bought = datetime(lo.year, lo.month, lo.day) + timedelta(
        seconds=rng.randrange(int((hi - lo).total_seconds()))
    )
    return Order(ids(), bought, after + timedelta(seconds=rng.randint(6 * 3600, days * 86400)))


def delayed_observations(v: Variant) -> list[Case]:
    """The same weekly cohorts at two cutoffs seven days apart: the first shows two of the four
    current orders (no alert), the next shows all four (a material alert)."""
    rng = v.rng("late-arrivals")
    w0 = date(*v.pick((2024, 4, 1), (2025, 6, 9)))
    w1, w2 = w0 + timedelta(days=7), w0 + timedelta(days=14)
    first = midnight(w2) + timedelta(days=7)
    second = first + timedelta(days=7)
    while True:
        ids = Ids(rng, "o_")
        base = draw(rng, ids, w0, w1, 8, 0.5)
        fast = draw(rng, ids, w1, w2, 2, 0.5)
        slow = [_arriving(rng, ids, w1, w2, first, 6) for _ in range(2)]
        later = draw(rng, ids, w2, second.date(), 5, 0.5)
        everything = observed_mean(fast + slow)
        if observed_mean(fast) < observed_mean(base) * Fraction(11, 10) and everything > (
            RULE * observed_mean(base) * Fraction(11, 10)
        ):
            break
    world = base + fast + slow + later
    unseen = {o.order_id: fmt_ts(o.delivered) for o in slow if o.delivered}
    cases = []
    for key, cutoff, note in (
        ("late-arrivals-first", first, "two current-cohort deliveries are not yet observed"),
        ("late-arrivals-next", second, "all four current-cohort deliveries are observed"),
    ):
        view = snapshot(world, cutoff)
        b, c = cohort(view, w0, w1), cohort(view, w1, w2)
        planting: dict[str, Any] = {
            "cutoff": fmt_ts(cutoff),
            "schedule": [fmt_ts(first), fmt_ts(second)],
            "why": "future outcomes are hidden at the first cutoff; the alert must wait for the "
            "next scheduled snapshot that contains the late deliveries",
        }
        if key == "late-arrivals-first":
            planting["unseen_event_times"] = unseen
        else:
            planting["revealed_event_times"] = unseen
        cases.append(
            Case(
                key=key,
                family="delayed_observations",
                level=6,
                title=f"Delivery monitoring at {fmt_ts(cutoff)}",
                question=monitor_question(cutoff, (w0, w1), (w1, w2), PENDING_TEXT),
                tables=(orders_table(v, view),),
                conditions=f"Extract at {fmt_ts(cutoff)}: {note}.",
                planting=planting,
                metrics=monitor_metrics(pending=True),
                reference=monitor_reference(b, c, pending=True),
                check_sql=monitor_check(v.table("orders"), (w0, w1), (w1, w2), pending=True),
            )
        )
    return cases


def duplicate_shipments(v: Variant) -> list[Case]:
    """A shipment export repeating the slowest current orders: order-level means are stable."""
    rng = v.rng("duplicate-shipments")
    base_m = date(*v.pick((2024, 9), (2025, 3)), 1)
    cur_m, after = add_months(base_m, 1), add_months(base_m, 2)
    current = v.size("duplicate-shipments", 34, 37, 45)
    while True:
        ids = Ids(rng, "o_")
        base, cur = (
            draw(rng, ids, base_m, cur_m, 28, 1.0),
            draw(rng, ids, cur_m, after, current, 1.0),
        )
        slowest = sorted(cur, key=lambda o: (o.delivered or o.purchased) - o.purchased)[-6:]
        rows = cur + slowest * 2
        rel = observed_mean(cur) / observed_mean(base) - 1
        if abs(rel) < 0.08 and observed_mean(rows) / observed_mean(base) - 1 > 0.25:
            break
    repeats = {o.order_id for o in slowest}
    order_rows: list[tuple[Value, ...]] = [
        (o.order_id, "delivered", fmt_ts(o.purchased))
        for o in sorted(base + cur, key=lambda o: (o.purchased, o.order_id))
    ]
    carriers = ("Rapido", "Correios", "Loggi")
    shipments: list[tuple[Value, ...]] = []
    for batch in (1, 2, 3):
        for o in sorted(base + cur, key=lambda o: (o.purchased, o.order_id)):
            if batch > 1 and o.order_id not in repeats:
                continue
            shipped = o.purchased + timedelta(hours=6 + len(o.order_id) % 5)
            carrier = carriers[int(o.order_id[-1], 16) % 3]
            delivered = fmt_ts(o.delivered) if o.delivered else None
            shipments.append((o.order_id, carrier, fmt_ts(shipped), delivered, batch))
    t_orders, t_ship = v.table("orders"), v.table("shipments")

    def window(lo: date, hi: date) -> str:
        a, b = ts_window(lo, hi)
        return f"o.purchased_at >= '{a}' AND o.purchased_at < '{b}'"

    check = (
        "WITH s AS (SELECT DISTINCT order_id, delivered_at FROM "
        f"{t_ship} WHERE delivered_at IS NOT NULL),\n"
        "d AS (SELECT o.order_id, o.purchased_at, (CAST(strftime('%s', s.delivered_at) AS "
        "INTEGER) - CAST(strftime('%s', o.purchased_at) AS INTEGER)) / 86400.0 AS days\n"
        f"  FROM {t_orders} o JOIN s ON s.order_id = o.order_id"
        " WHERE o.order_status = 'delivered'),\n"
        f"m AS (SELECT (SELECT AVG(days) FROM d o WHERE {window(base_m, cur_m)}) AS b,\n"
        f"  (SELECT AVG(days) FROM d o WHERE {window(cur_m, after)}) AS c,\n"
        f"  (SELECT COUNT(*) FROM d o WHERE {window(cur_m, after)}) AS n)\n"
        "SELECT b AS baseline_mean_delivery_days, c AS current_mean_delivery_days,\n"
        "  CASE WHEN c > 1.2 * b THEN 'yes' ELSE 'no' END AS material_alert,\n"
        "  n AS current_delivered_orders FROM m"
    )
    reference = monitor_reference(base, cur, pending=False)
    reference["current_delivered_orders"] = len(cur)
    return [
        Case(
            key="duplicate-shipments",
            family="duplicate_shipment_export",
            level=6,
            title=f"Delivery monitoring over a shipment export, {month_label(cur_m)}",
            question=monitor_question(
                midnight(after) + timedelta(days=21),
                (base_m, cur_m),
                (cur_m, after),
                (DELIVERED_TEXT,),
            ),
            tables=(
                Table(
                    t_orders,
                    (("order_id", "TEXT"), ("order_status", "TEXT"), ("purchased_at", "TEXT")),
                    order_rows,
                ),
                Table(
                    t_ship,
                    (
                        ("order_id", "TEXT"),
                        ("carrier", "TEXT"),
                        ("shipped_at", "TEXT"),
                        ("delivered_at", "TEXT"),
                        ("export_batch", "INTEGER"),
                    ),
                    shipments,
                ),
            ),
            conditions="Both cohorts fully observed; the shipment export repeats the six "
            "slowest current orders in two further export batches.",
            planting={
                "repeated_order_ids": sorted(repeats),
                "copies_per_repeated_order": 3,
                "row_level_current_mean": float(observed_mean(rows)),
                "why": "row-level averaging inflates the current mean past the alert rule; "
                "order-level metrics are unchanged by the duplicates",
            },
            metrics=(
                *monitor_metrics(pending=False),
                metric("current_delivered_orders", "count", "orders", "Distinct current orders."),
            ),
            reference=reference,
            check_sql=check,
        )
    ]


def current_period_unobserved(v: Variant) -> list[Case]:
    """An extract taken before any current-cohort order has been delivered."""
    rng = v.rng("unobserved-period")
    w0 = date(*v.pick((2024, 5, 6), (2025, 11, 3)))
    w1, w2 = w0 + timedelta(days=7), w0 + timedelta(days=14)
    cutoff = midnight(w2) + timedelta(days=1)
    ids = Ids(rng, "o_")
    older = draw(rng, ids, w0 - timedelta(days=7), w0, 7, 0.5)
    base = draw(rng, ids, w0, w1, 9, 0.5)
    current = [_arriving(rng, ids, w1, w2, cutoff, 8) for _ in range(6)]
    view = snapshot(older + base + current, cutoff)
    if any(o.delivered for o in cohort(view, w1, w2)) or not observed_mean(cohort(view, w0, w1)):
        raise ValueError("unobserved-period: planting failed")
    condition = (
        f"At the extract time ({fmt_ts(cutoff)}) none of the current cohort's orders has been "
        "delivered (all shipped, delivery timestamp empty), so the current mean delivery time "
        "and the comparison are undefined; treating the missing deliveries as zero days, or "
        "raising or clearing the alert, invents a value."
    )
    return [
        Case(
            key="unobserved-period",
            family="entire_current_period_unobserved",
            level=6,
            title=f"Delivery monitoring at {fmt_ts(cutoff)}",
            question=monitor_question(cutoff, (w0, w1), (w1, w2), ()),
            tables=(orders_table(v, view),),
            conditions=condition,
            planting={
                "unseen_event_times": {
                    o.order_id: fmt_ts(o.delivered) for o in current if o.delivered
                },
                "baseline_mean_delivery_days": float(observed_mean(cohort(view, w0, w1))),
                "why": "missing durations are not zero; the comparison cannot be calculated",
            },
            refusal={
                "must_name": [
                    ["delivered", "delivery", "deliveries"],
                    [
                        "pending",
                        "undelivered",
                        "unobserved",
                        "not yet",
                        "in transit",
                        "none",
                        "zero",
                        "shipped",
                        "outstanding",
                        "not observed",
                        "not been delivered",
                    ],
                ],
                "forbidden_metric": "current_mean_delivery_days",
                "conditions": condition,
            },
        )
    ]
