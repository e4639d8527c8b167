"""Report cases: delivery/review report, repeat-purchasing report, causal review question."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from fractions import Fraction

from scenarios.acceptance.model import (
    Case,
    Ids,
    RefValue,
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

__all__ = ["causal_review", "delivery_review_report", "repeat_purchasing_report"]

ORDER_COLUMNS = (
    ("order_id", "TEXT"),
    ("customer_id", "TEXT"),
    ("order_status", "TEXT"),
    ("purchased_at", "TEXT"),
    ("delivered_at", "TEXT"),
    ("estimated_delivery_at", "TEXT"),
)
REVIEW_COLUMNS = (
    ("review_id", "TEXT"),
    ("order_id", "TEXT"),
    ("review_score", "INTEGER"),
    ("review_created_at", "TEXT"),
)
Order = tuple[str, str, str, datetime, datetime | None, datetime]


def delivery_review_report(v: Variant) -> list[Case]:
    """A month's delivery/review report: five metrics, each requested exactly once."""
    rng = v.rng("delivery-review-report")
    start = date(*v.pick((2024, 3), (2025, 5)), 1)
    end = add_months(start, 1)
    oid, cid, rid = Ids(rng, "o_"), Ids(rng, "c_"), Ids(rng, "r_")
    orders: list[Order] = []
    for lo, hi, count in (
        (add_months(start, -1), start, 10),
        (start, end, v.size("delivery-review-report", 42, 46, 58)),
        (end, add_months(end, 1), 8),
    ):
        for i in range(count):
            bought = day_seconds(rng, lo, hi)
            estimate = midnight(bought.date() + timedelta(days=rng.randint(12, 24)))
            status = "delivered" if i % 12 else rng.choice(["shipped", "canceled"])
            delivered: datetime | None = None
            if status == "delivered":
                delivered = bought + timedelta(seconds=rng.randint(2 * 86400, 30 * 86400))
            orders.append((oid(), cid(), status, bought, delivered, estimate))
    in_month = [o for o in orders if midnight(start) <= o[3] < midnight(end) and o[4]]
    # Plants: two delivered orders without a timestamp, one delivered exactly at its estimate.
    for victim in in_month[:2]:
        orders[orders.index(victim)] = (*victim[:4], None, victim[5])
    exact = in_month[2]
    orders[orders.index(exact)] = (*exact[:4], exact[5], exact[5])
    reviews: list[tuple[Value, ...]] = []
    for order in orders:
        copies = rng.choices([0, 1, 2], weights=[12, 76, 12])[0]
        for _ in range(copies):
            late = order[4] is not None and order[4] > order[5]
            score = rng.choice([1, 2, 3] if late else [3, 4, 5, 5])
            created = (order[4] or order[5]) + timedelta(hours=rng.randint(2, 200))
            reviews.append((rid(), order[0], score, fmt_ts(created)))
    lo, hi = midnight(start), midnight(end)
    cohort = [o for o in orders if o[2] == "delivered" and o[4] is not None and lo <= o[3] < hi]
    ids = {o[0] for o in cohort}
    scores = [int(str(r[2])) for r in reviews if r[1] in ids]
    reviewed = {r[1] for r in reviews}
    reference: dict[str, RefValue] = {
        "delivered_orders": len(cohort),
        "mean_delivery_days": mean_days([(o[3], o[4]) for o in cohort if o[4]]),
        "late_share": Fraction(sum(1 for o in cohort if o[4] and o[4] > o[5]), len(cohort)),
        "average_review_score": Fraction(sum(scores), len(scores)),
        "orders_without_review": len(ids - reviewed),
    }
    t_orders, t_reviews = v.table("orders"), v.table("reviews")
    a, b = ts_window(start, end)
    question = (
        f"Delivery report for orders purchased in {month_label(start)} (purchased_at from {a} up "
        f"to but not including {b}) with status `delivered` and a recorded delivery timestamp. "
        "Report each metric exactly once: `delivered_orders` (count of these orders); "
        "`mean_delivery_days` (mean elapsed time from purchase to delivery in fractional days, "
        "exact seconds / 86400); `late_share` (share of these orders delivered strictly after "
        "their estimated delivery time, a ratio between 0 and 1); `average_review_score` (mean "
        "review score over all review rows of these orders, so an order with two reviews counts "
        "twice); `orders_without_review` (count of these orders with no review row)."
    )
    check = (
        "WITH c AS (\n"
        "  SELECT order_id, CAST(strftime('%s', delivered_at) AS INTEGER)\n"
        "    - CAST(strftime('%s', purchased_at) AS INTEGER) AS secs,\n"
        "    delivered_at > estimated_delivery_at AS late\n"
        f"  FROM {t_orders} WHERE order_status = 'delivered' AND delivered_at IS NOT NULL\n"
        f"    AND purchased_at >= '{a}' AND purchased_at < '{b}')\n"
        "SELECT (SELECT COUNT(*) FROM c) AS delivered_orders,\n"
        "  (SELECT SUM(secs) / 86400.0 / COUNT(*) FROM c) AS mean_delivery_days,\n"
        "  (SELECT 1.0 * SUM(late) / COUNT(*) FROM c) AS late_share,\n"
        f"  (SELECT AVG(r.review_score) FROM {t_reviews} r JOIN c ON c.order_id = r.order_id)"
        " AS average_review_score,\n"
        f"  (SELECT COUNT(*) FROM c WHERE order_id NOT IN (SELECT order_id FROM {t_reviews}))"
        " AS orders_without_review"
    )
    rows: list[tuple[Value, ...]] = [
        (o[0], o[1], o[2], fmt_ts(o[3]), fmt_ts(o[4]) if o[4] else None, fmt_ts(o[5]))
        for o in sorted(orders, key=lambda o: (o[3], o[0]))
    ]
    return [
        Case(
            key="delivery-review-report",
            family="delivery_review_report",
            level=5,
            title=f"Delivery and review report, {month_label(start)}",
            question=question,
            tables=(
                Table(t_orders, ORDER_COLUMNS, rows),
                Table(t_reviews, REVIEW_COLUMNS, reviews),
            ),
            conditions="Complete extract; delivered orders without a delivery timestamp, orders "
            "with two reviews or none, and undelivered orders are present.",
            planting={
                "delivered_without_timestamp": [o[0] for o in in_month[:2]],
                "delivered_exactly_at_estimate": exact[0],
                "orders_with_two_reviews": sorted(
                    i for i in ids if sum(1 for r in reviews if r[1] == i) == 2
                ),
                "why": "population, strict lateness, review-row weighting and one row per metric",
            },
            metrics=(
                metric("delivered_orders", "count", "orders", "Delivered, timestamped orders."),
                metric("mean_delivery_days", "duration", "days", "Mean purchase-to-delivery."),
                metric("late_share", "ratio", "ratio", "Share delivered after the estimate."),
                metric("average_review_score", "ratio", "points", "Mean over review rows."),
                metric("orders_without_review", "count", "orders", "Orders with no review."),
            ),
            reference=reference,
            check_sql=check,
        )
    ]


def repeat_purchasing_report(v: Variant) -> list[Case]:
    """A quarter's repeat purchasing at person grain over orders of every status."""
    rng = v.rng("repeat-purchasing-report")
    quarter = date(*v.pick((2024, 4), (2025, 1)), 1)
    end = add_months(quarter, 3)
    oid, pid, cid = Ids(rng, "o_"), Ids(rng, "p_"), Ids(rng, "c_")
    cities = [("Sao Paulo", "SP"), ("Campinas", "SP"), ("Rio de Janeiro", "RJ"), ("Curitiba", "PR")]
    orders: list[tuple[str, str, str, datetime]] = []
    customers: list[tuple[Value, ...]] = []
    statuses = ["delivered"] * 8 + ["canceled", "shipped", "invoiced"]
    for _ in range(rng.randint(38, 46)):
        person, (city, state) = pid(), rng.choice(cities)
        inside = rng.choices([1, 2, 3, 4], weights=[62, 22, 11, 5])[0]
        outside = rng.choices([0, 1], weights=[75, 25])[0]
        spans = [(quarter, end)] * inside + [(add_months(quarter, -2), quarter)] * outside
        for lo, hi in spans:
            customer = cid()
            customers.append((customer, person, city, state))
            orders.append((oid(), customer, rng.choice(statuses), day_seconds(rng, lo, hi)))
    person_of = {str(c[0]): str(c[1]) for c in customers}
    lo, hi = midnight(quarter), midnight(end)
    per_person: dict[str, set[str]] = {}
    for order_id, customer, _, bought in orders:
        if lo <= bought < hi:
            per_person.setdefault(person_of[customer], set()).add(order_id)
    persons = len(per_person)
    reference: dict[str, RefValue] = {
        "persons": persons,
        "repeat_person_share": Fraction(
            sum(1 for s in per_person.values() if len(s) >= 2), persons
        ),
        "mean_orders_per_person": Fraction(sum(len(s) for s in per_person.values()), persons),
    }
    t_orders, t_customers = v.table("orders"), v.table("customers")
    a, b = ts_window(quarter, end)
    label = f"Q{(quarter.month - 1) // 3 + 1} {quarter.year}"
    question = (
        f"Repeat-purchasing report for {label}: take every order purchased from {a} up to but "
        f"not including {b}, whatever its status, and identify the person who placed it by "
        "`customer_person_id` (a person may have several customer ids). Report each metric "
        "exactly once: `persons` (people with at least one such order), `repeat_person_share` "
        "(share of those people with two or more distinct orders, a ratio between 0 and 1) and "
        "`mean_orders_per_person` (distinct orders divided by people)."
    )
    check = (
        "WITH p AS (\n"
        "  SELECT c.customer_person_id AS person, COUNT(DISTINCT o.order_id) AS n\n"
        f"  FROM {t_orders} o JOIN {t_customers} c ON c.customer_id = o.customer_id\n"
        f"  WHERE o.purchased_at >= '{a}' AND o.purchased_at < '{b}'\n"
        "  GROUP BY c.customer_person_id)\n"
        "SELECT COUNT(*) AS persons, 1.0 * SUM(n >= 2) / COUNT(*) AS repeat_person_share,\n"
        "  1.0 * SUM(n) / COUNT(*) AS mean_orders_per_person FROM p"
    )
    order_rows: list[tuple[Value, ...]] = [
        (o, c, s, fmt_ts(t)) for o, c, s, t in sorted(orders, key=lambda o: (o[3], o[0]))
    ]
    return [
        Case(
            key="repeat-purchasing-report",
            family="repeat_purchasing_report",
            level=5,
            title=f"Repeat purchasing report, {label}",
            question=question,
            tables=(
                Table(
                    t_orders,
                    (
                        ("order_id", "TEXT"),
                        ("customer_id", "TEXT"),
                        ("order_status", "TEXT"),
                        ("purchased_at", "TEXT"),
                    ),
                    order_rows,
                ),
                Table(
                    t_customers,
                    (
                        ("customer_id", "TEXT"),
                        ("customer_person_id", "TEXT"),
                        ("customer_city", "TEXT"),
                        ("customer_state", "TEXT"),
                    ),
                    sorted(customers, key=lambda c: str(c[0])),
                ),
            ),
            conditions="Complete extract; every order has its own customer id, people repeat "
            "through customer_person_id, and some repeat only across the quarter boundary.",
            planting={
                "why": "customer_id grain shows no repeats; status filters and out-of-quarter "
                "orders change the population",
            },
            metrics=(
                metric("persons", "count", "persons", "People with an order in the quarter."),
                metric("repeat_person_share", "ratio", "ratio", "People with 2+ orders."),
                metric("mean_orders_per_person", "ratio", "orders per person", "Orders/people."),
            ),
            reference=reference,
            check_sql=check,
        )
    ]


def causal_review(v: Variant) -> list[Case]:
    """An observational extract asked for a causal effect of a carrier switch on reviews."""
    rng = v.rng("causal-review")
    switch = date(*v.pick((2024, 2, 15), (2025, 9, 8)))
    start, end = add_months(switch, -2), add_months(switch, 2)
    oid, rid = Ids(rng, "o_"), Ids(rng, "r_")
    metro = ("SP", "RJ")
    orders: list[tuple[Value, ...]] = []
    reviews: list[tuple[Value, ...]] = []
    for _ in range(rng.randint(70, 90)):
        bought = day_seconds(rng, start, end)
        state = rng.choice(["SP", "SP", "RJ", "MG", "BA", "RS", "PE"])
        express = bought.date() >= switch and state in metro
        days = (
            rng.randint(1, 4) if express else rng.randint(4, 16) + (3 if state not in metro else 0)
        )
        delivered = bought + timedelta(days=days, seconds=rng.randint(0, 80000))
        carrier = "express" if express else "standard"
        orders.append((oid(), state, carrier, fmt_ts(bought), fmt_ts(delivered)))
        base = 4 if state in metro else 3
        score = max(1, min(5, base + rng.choice([-1, 0, 0, 1]) + (days <= 5)))
        reviews.append((rid(), orders[-1][0], score, fmt_ts(delivered + timedelta(hours=30))))
    orders.sort(key=lambda o: (str(o[3]), str(o[0])))
    condition = (
        f"Observational extract only: from {switch.isoformat()} the express carrier was used "
        "only for metro-state (SP, RJ) orders, so carrier is confounded with region and period; "
        "there is no randomized assignment, control group or experiment record, and the causal "
        "effect on review scores is not identifiable from these data."
    )
    return [
        Case(
            key="causal-review",
            family="causal_review_improvement",
            level=5,
            title="Causal effect of the express carrier on review scores",
            question=(
                f"Starting on {switch.isoformat()}, orders began to ship with the `express` "
                "carrier. By how many points did switching to the express carrier cause the "
                "average review score to increase? Report metric `causal_review_effect` in "
                "review points (1-5 scale)."
            ),
            tables=(
                Table(
                    v.table("orders"),
                    (
                        ("order_id", "TEXT"),
                        ("customer_state", "TEXT"),
                        ("carrier", "TEXT"),
                        ("purchased_at", "TEXT"),
                        ("delivered_at", "TEXT"),
                    ),
                    orders,
                ),
                Table(v.table("reviews"), REVIEW_COLUMNS, sorted(reviews, key=lambda r: str(r[0]))),
            ),
            conditions=condition,
            planting={
                "assignment": "express only for SP/RJ orders on or after the switch date",
                "confounders": ["customer_state (metro orders already score higher)", "period"],
                "why": "a before/after or carrier difference is an association, not an effect",
            },
            refusal={
                "must_name": [
                    ["causal", "cause", "caused", "causation", "causally", "causality"],
                    [
                        "randomized",
                        "randomised",
                        "randomization",
                        "randomisation",
                        "experiment",
                        "experimental",
                        "control group",
                        "counterfactual",
                        "confounding",
                        "confounder",
                        "confounders",
                        "confounded",
                        "a/b test",
                    ],
                ],
                "forbidden_metric": "causal_review_effect",
                "conditions": condition,
            },
        )
    ]
