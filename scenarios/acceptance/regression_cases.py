"""The six original questions (three failures, three controls) as scenario dicts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CASES", "RegressionCase"]

DATASET = {"world": "olist", "snapshot": "base"}


@dataclass(frozen=True)
class RegressionCase:
    role: str
    """`original` (a recorded failure) or `control` (a healthy baseline question)."""
    origin: str
    """What the original run did wrong (originals) or why the control is kept."""
    scenario: dict[str, Any]


def _m(name: str, kind: str, unit: str) -> dict[str, str]:
    return {"name": name, "kind": kind, "unit": unit}


REPEAT_METRICS = [
    _m("persons", "count", "persons"),
    _m("repeat_person_share", "ratio", "ratio"),
    _m("mean_orders_per_person", "ratio", "orders per person"),
]
REPEAT_TEXT = (
    "Identify a person by `customer_unique_id` and count each person's distinct orders, in any "
    "order status. Report each metric exactly once: `persons` (people with at least one such "
    "order), `repeat_person_share` (share of those people with two or more distinct orders, a "
    "ratio between 0 and 1) and `mean_orders_per_person` (distinct orders divided by people)."
)


def _repeat_sql(where: str) -> str:
    return (
        "WITH p AS (SELECT c.customer_unique_id, COUNT(DISTINCT o.order_id) AS n\n"
        "  FROM orders o JOIN customers c ON c.customer_id = o.customer_id\n"
        f"  {where}GROUP BY c.customer_unique_id)\n"
        "SELECT COUNT(*) AS persons, 1.0 * SUM(n >= 2) / COUNT(*) AS repeat_person_share,\n"
        "  1.0 * SUM(n) / COUNT(*) AS mean_orders_per_person FROM p"
    )


def _delivery_sql(lo: str, hi: str, unreviewed: bool) -> str:
    extra = (
        ",\n  (SELECT COUNT(*) FROM c WHERE order_id NOT IN (SELECT order_id FROM order_reviews))"
        " AS orders_without_review"
        if unreviewed
        else ""
    )
    return (
        "WITH c AS (SELECT order_id,\n"
        "    CAST(strftime('%s', order_delivered_customer_date) AS INTEGER)\n"
        "      - CAST(strftime('%s', order_purchase_timestamp) AS INTEGER) AS secs,\n"
        "    order_delivered_customer_date > order_estimated_delivery_date AS late\n"
        "  FROM orders WHERE order_status = 'delivered'\n"
        "    AND order_delivered_customer_date IS NOT NULL\n"
        f"    AND order_purchase_timestamp >= '{lo}' AND order_purchase_timestamp < '{hi}')\n"
        "SELECT (SELECT COUNT(*) FROM c) AS delivered_orders,\n"
        "  (SELECT SUM(secs) / 86400.0 / COUNT(*) FROM c) AS mean_delivery_days,\n"
        "  (SELECT 1.0 * SUM(late) / COUNT(*) FROM c) AS late_share,\n"
        "  (SELECT AVG(r.review_score) FROM order_reviews r JOIN c ON c.order_id = r.order_id)"
        f" AS average_review_score{extra}"
    )


def _delivery_text(label: str, lo: str, hi: str, unreviewed: bool) -> str:
    tail = (
        "; `orders_without_review` (how many of these orders have no review row)"
        if unreviewed
        else ""
    )
    return (
        f"Delivery and satisfaction report for orders purchased in {label} (purchase timestamp "
        f"from {lo} up to but not including {hi}) with status delivered and a recorded customer "
        "delivery timestamp. Report each metric exactly once, one row per metric: "
        "`delivered_orders` (the number of such orders); `mean_delivery_days` (mean exact "
        "elapsed time from purchase to customer delivery, in fractional days); `late_share` "
        "(share delivered strictly after the estimated delivery timestamp: the full customer "
        "delivery timestamp compared with `order_estimated_delivery_date`, which is stored as "
        "00:00:00 at the start of the estimated day, so a delivery at any time on the estimated "
        "day itself counts as late; a ratio between 0 and 1); "
        "`average_review_score` (mean review score over all review rows of these orders, each "
        f"row counted once, in points){tail}."
    )


DELIVERY_METRICS = [
    _m("delivered_orders", "count", "orders"),
    _m("mean_delivery_days", "duration", "days"),
    _m("late_share", "ratio", "ratio"),
    _m("average_review_score", "ratio", "points"),
]


def _scenario(
    sid: str, title: str, level: int, family: str, question: str, version: int = 1, **rest: Any
) -> dict[str, Any]:
    return {
        "id": sid,
        "version": version,
        "title": title,
        "question": question,
        "dataset": dict(DATASET),
        "split": "regression",
        "level": level,
        "family": family,
        **rest,
    }


CASES: tuple[RegressionCase, ...] = (
    RegressionCase(
        "original",
        "The analyst looped on queries for costs that do not exist instead of declining.",
        _scenario(
            "reg-missing-cost-2018",
            "Net profit and margin for 2018 without a cost ledger",
            3,
            "net_profit",
            "What were net profit and net profit margin on delivered orders purchased in 2018 "
            "(purchase timestamp from 2018-01-01 00:00:00 up to but not including 2019-01-01 "
            "00:00:00), with net profit being item revenue less all costs of those orders? "
            "Report `net_profit` in BRL and `net_margin` as a ratio.",
            answerable=False,
            refusal={
                "must_name": [
                    [
                        "cost",
                        "costs",
                        "expense",
                        "expenses",
                        "cost ledger",
                        "expense ledger",
                        "cogs",
                        "cost of goods",
                    ]
                ],
                "forbidden_metric": "net_profit",
                "conditions": "The Olist extract has sales-side records only (orders, items, "
                "freight charged, payments, reviews); no cost of goods, carrier cost, fee or "
                "operating expense ledger exists, so net profit and margin cannot be computed.",
            },
        ),
    ),
    RegressionCase(
        "original",
        "The quarterly repeat report for the quarter ending September 2017 cited evidence that "
        "did not run.",
        _scenario(
            "reg-repeat-report-2017-09",
            "Repeat-purchasing report, quarter ending September 2017",
            5,
            "repeat_purchasing",
            "Repeat-purchasing report for the quarter ending September 2017: take the orders "
            "purchased from 2017-07-01 00:00:00 up to but not including 2017-10-01 00:00:00. "
            + REPEAT_TEXT,
            answerable=True,
            metrics=REPEAT_METRICS,
            check_sql=_repeat_sql(
                "WHERE o.order_purchase_timestamp >= '2017-07-01 00:00:00'\n"
                "    AND o.order_purchase_timestamp < '2017-10-01 00:00:00'\n  "
            ),
        ),
    ),
    RegressionCase(
        "original",
        "The March 2018 delivery report listed some metrics more than once.",
        _scenario(
            "reg-delivery-report-2018-03",
            "Delivery and satisfaction report, March 2018",
            5,
            "delivery",
            _delivery_text("March 2018", "2018-03-01 00:00:00", "2018-04-01 00:00:00", True),
            version=2,  # v2: says which lateness comparison it means
            answerable=True,
            metrics=[*DELIVERY_METRICS, _m("orders_without_review", "count", "orders")],
            check_sql=_delivery_sql("2018-03-01 00:00:00", "2018-04-01 00:00:00", True),
        ),
    ),
    RegressionCase(
        "control",
        "Healthy control: ordinary repeat-purchasing report over the whole extract.",
        _scenario(
            "reg-control-repeat-purchasing",
            "Repeat-purchasing report, whole extract",
            5,
            "repeat_purchasing",
            "Repeat-purchasing report over every order in the extract, all purchase dates. "
            + REPEAT_TEXT,
            answerable=True,
            metrics=REPEAT_METRICS,
            check_sql=_repeat_sql(""),
        ),
    ),
    RegressionCase(
        "control",
        "Healthy control: delivery/satisfaction report for 2017 purchases.",
        _scenario(
            "reg-control-delivery-satisfaction",
            "Delivery and satisfaction report, 2017",
            5,
            "delivery",
            _delivery_text("2017", "2017-01-01 00:00:00", "2018-01-01 00:00:00", False),
            version=2,  # v2: says which lateness comparison it means
            answerable=True,
            metrics=DELIVERY_METRICS,
            check_sql=_delivery_sql("2017-01-01 00:00:00", "2018-01-01 00:00:00", False),
        ),
    ),
    RegressionCase(
        "control",
        "Healthy control: delivered-order count.",
        _scenario(
            "reg-control-delivered-orders",
            "Delivered orders",
            1,
            "order_counts",
            "How many orders in the extract have order status `delivered`? Count each order "
            "once, over all purchase dates. Report metric `delivered_orders` (a count of orders).",
            answerable=True,
            metrics=[_m("delivered_orders", "count", "orders")],
            check_sql="SELECT COUNT(*) AS delivered_orders FROM orders "
            "WHERE order_status = 'delivered'",
        ),
    ),
)
