"""Payment-export cases: signed revenue in minor units, and repeated export rows."""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta
from decimal import Decimal

from scenarios.acceptance.model import (
    Case,
    Ids,
    Table,
    Value,
    Variant,
    add_months,
    cents,
    day_seconds,
    fmt_ts,
    metric,
    month_bounds,
    month_label,
)

__all__ = ["repeated_export_rows", "signed_revenue"]


def _events(
    rng: random.Random, start: date, end: date, count: int, refund_rate: float
) -> list[tuple[str, str, int, datetime]]:
    """(order ref, type, signed amount in cents, booked at): charges and later refunds."""
    orders = Ids(rng, "ord_")
    out: list[tuple[str, str, int, datetime]] = []
    for _ in range(count):
        order, booked = orders(), day_seconds(rng, start, end)
        amount = int(cents(rng, 15, 480) * 100)
        out.append((order, "charge", amount, booked))
        if rng.random() < refund_rate:
            refund = amount if rng.random() < 0.5 else rng.randint(300, amount - 1)
            later = booked + timedelta(days=rng.randint(0, 9), seconds=rng.randint(60, 80000))
            out.append((order, "refund", -refund, later))
    return out


def _boundaries(rng: random.Random, start: date, end: date) -> list[tuple[str, str, int, datetime]]:
    """Events one second either side of each period edge (two in, two out)."""
    first, nxt = datetime(start.year, start.month, start.day), datetime(end.year, end.month, 1)
    second, orders = timedelta(seconds=1), Ids(rng, "ord_")
    return [
        (orders(), "charge", 12990, first - second),
        (orders(), "charge", 8450, first),
        (orders(), "refund", -3120, nxt - second),
        (orders(), "charge", 20500, nxt),
    ]


def signed_revenue(v: Variant) -> list[Case]:
    """Net signed revenue over a month; amounts are integer minor units, refunds negative."""
    rng = v.rng("signed-revenue")
    start, end = month_bounds(*v.pick((2024, 2), (2025, 11)))
    before, after = add_months(start, -1), end
    events = _events(rng, start, end, rng.randint(30, 38), 0.3)
    events += _events(rng, before, start, 6, 0.3) + _events(rng, after, after + timedelta(10), 5, 0)
    events += _boundaries(rng, start, end)
    events.sort(key=lambda e: (e[3], e[0], e[1]))
    ids = Ids(rng, "pe_")
    table = v.table("payments")
    rows: list[tuple[Value, ...]] = [
        (ids(), order, kind, amount, v.currency, fmt_ts(at)) for order, kind, amount, at in events
    ]
    lo, hi = datetime(start.year, start.month, 1), datetime(end.year, end.month, 1)
    inside = [e for e in events if lo <= e[3] < hi]
    total = Decimal(sum(e[2] for e in inside)).scaleb(-2)
    refunds = [e for e in inside if e[1] == "refund"]
    question = (
        f"What was net revenue from the payment events booked in {month_label(start)} (booked_at "
        f"from {fmt_ts(lo)} up to but not including {fmt_ts(hi)})? Net revenue is the sum of the "
        "signed amounts of all charge and refund events booked in that period; refunds carry "
        f"negative amounts and reduce it. Report metric `net_revenue` in {v.currency} "
        "(major currency units, e.g. 1234.56)."
    )
    check = (
        f"SELECT ROUND(SUM(amount_minor) / 100.0, 2) AS net_revenue FROM {table}\n"
        f"WHERE booked_at >= '{fmt_ts(lo)}' AND booked_at < '{fmt_ts(hi)}'"
    )
    return [
        Case(
            key="signed-revenue",
            family="signed_revenue",
            level=2,
            title=f"Net signed revenue, {month_label(start)}",
            question=question,
            tables=(
                Table(
                    table,
                    (
                        ("event_id", "TEXT"),
                        ("order_ref", "TEXT"),
                        ("event_type", "TEXT"),
                        ("amount_minor", "INTEGER"),
                        ("currency", "TEXT"),
                        ("booked_at", "TEXT"),
                    ),
                    rows,
                ),
            ),
            conditions="Complete payment export for the period; amounts are signed integer "
            "minor units (1/100 of the currency), refunds negative.",
            planting={
                "amount_unit": "amount_minor holds signed integer minor units (cents)",
                "refund_events_in_period": len(refunds),
                "refund_total_in_period": str(Decimal(sum(e[2] for e in refunds)).scaleb(-2)),
                "edge_events": "one second either side of both period edges (2 in, 2 out)",
                "traps": [
                    "not dividing by 100 overstates the answer 100-fold",
                    "dropping or unsigning refunds overstates it",
                    "events outside the month are present",
                ],
            },
            metrics=(
                metric("net_revenue", "currency", v.currency, "Signed sum of charges and refunds."),
            ),
            reference={"net_revenue": total},
            check_sql=check,
        )
    ]


def repeated_export_rows(v: Variant) -> list[Case]:
    """A payment export where some events appear in two export batches (refunds included)."""
    rng = v.rng("repeated-export-rows")
    start, end = month_bounds(*v.pick((2024, 4), (2025, 6)))
    events = _events(rng, start, end, rng.randint(26, 32), 0.35)
    events += _events(rng, end, end + timedelta(days=12), 5, 0.4)
    events.sort(key=lambda e: (e[3], e[0], e[1]))
    ids = Ids(rng, "ev_")
    base = [
        (ids(), order, kind, Decimal(amount).scaleb(-2), at) for order, kind, amount, at in events
    ]
    lo, hi = datetime(start.year, start.month, 1), datetime(end.year, end.month, 1)
    inside = [e for e in base if lo <= e[4] < hi]
    refunds = [e for e in inside if e[2] == "refund"]
    charges = [e for e in inside if e[2] == "charge"]
    repeated = rng.sample(refunds, 2) + rng.sample(charges, 6)
    repeated += [next(e for e in base if e[4] >= hi)]
    repeated_ids = {e[0] for e in repeated}
    rows: list[tuple[Value, ...]] = []
    for event_id, order, kind, amount, at in base:
        rows.append((event_id, 1, order, kind, amount, v.currency, fmt_ts(at)))
    for event_id, order, kind, amount, at in sorted(repeated, key=lambda e: (e[4], e[0])):
        rows.append((event_id, 2, order, kind, amount, v.currency, fmt_ts(at)))
    net = sum((e[3] for e in inside), Decimal(0))
    refund_total = sum((e[3] for e in refunds), Decimal(0))
    naive = net + sum((e[3] for e in repeated if lo <= e[4] < hi), Decimal(0))
    if naive == net:
        raise ValueError("repeated-export-rows: duplicates do not change the naive sum")
    table = v.table("payments")
    question = (
        f"For payment events booked in {month_label(start)} (booked_at from {fmt_ts(lo)} up to "
        f"but not including {fmt_ts(hi)}), counting each event (`event_id`) once: report "
        f"`net_revenue` (signed sum of charges and refunds, {v.currency}), `refund_total` (the "
        f"signed sum of refund events, a negative amount in {v.currency}) and `payment_events` "
        "(the number of distinct events)."
    )
    window = f"booked_at >= '{fmt_ts(lo)}' AND booked_at < '{fmt_ts(hi)}'"
    check = (
        f"WITH e AS (SELECT DISTINCT event_id, event_type, amount FROM {table} WHERE {window})\n"
        "SELECT ROUND(SUM(amount), 2) AS net_revenue,\n"
        "  ROUND(SUM(CASE WHEN event_type = 'refund' THEN amount ELSE 0 END), 2) AS refund_total,\n"
        "  COUNT(*) AS payment_events FROM e"
    )
    return [
        Case(
            key="repeated-export-rows",
            family="repeated_export_rows",
            level=3,
            title=f"Net revenue over a repeated export, {month_label(start)}",
            question=question,
            tables=(
                Table(
                    table,
                    (
                        ("event_id", "TEXT"),
                        ("export_batch", "INTEGER"),
                        ("order_ref", "TEXT"),
                        ("event_type", "TEXT"),
                        ("amount", "REAL"),
                        ("currency", "TEXT"),
                        ("booked_at", "TEXT"),
                    ),
                    rows,
                ),
            ),
            conditions="Every event is present; some events were exported twice (identical "
            "rows apart from export_batch).",
            planting={
                "repeated_event_ids": sorted(repeated_ids),
                "repeated_refunds_in_period": 2,
                "naive_row_sum_in_period": str(naive),
                "why": "summing rows double-counts repeated events; deduplicating by dropping "
                "refunds or taking absolute values loses the sign",
            },
            metrics=(
                metric("net_revenue", "currency", v.currency, "Signed sum, each event once."),
                metric("refund_total", "currency", v.currency, "Signed refund sum, each once."),
                metric("payment_events", "count", "events", "Distinct event_id in the period."),
            ),
            reference={
                "net_revenue": net,
                "refund_total": refund_total,
                "payment_events": len(inside),
            },
            check_sql=check,
        )
    ]
