"""Polars oracles for the level-6 replay scenarios: one per answerable scenario.

Each standing review is one function of its period; an oracle is that function bound to the
period its scenario asks about, registered under the scenario's `oracle_name`. Oracles read a
snapshot's canonical Parquet only (no SQL, nothing from the plant declarations): whatever the
snapshot did not observe at its cutoff is simply absent, so "counting only what was observed
by the cutoff" needs no cutoff here. Alert rules are the ones stated in the questions.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl

from scenarios.world_base import Oracle

__all__ = [
    "DELIVERY_ALERT_DAYS",
    "ORACLES",
    "REPEAT_ALERT_SHARE",
    "SELLER_ALERT_FRACTION",
    "delivery_review",
    "repeat_review",
    "seller_review",
]

FMT = "%Y-%m-%d %H:%M:%S"
DELIVERY_ALERT_DAYS = 1.0
"""Alert when the review month's mean delivery time exceeds the previous month's by more."""
REPEAT_ALERT_SHARE = 0.02
"""Alert when the quarter's repeat-person share exceeds the previous quarter's by more."""
SELLER_ALERT_FRACTION = 0.5
"""Alert when the top seller's review-week revenue is below this fraction of its baseline."""


def _t(pq: Path, table: str) -> pl.DataFrame:
    return pl.read_parquet(pq / f"{table}.parquet")


def _between(col: str, start: datetime, end: datetime) -> pl.Expr:
    return (pl.col(col) >= start.strftime(FMT)) & (pl.col(col) < end.strftime(FMT))


def _month_after(start: datetime) -> datetime:
    return datetime(start.year + start.month // 12, start.month % 12 + 1, 1)


def _delivery_days(orders: pl.DataFrame, start: datetime) -> pl.Series:
    delivered = orders.filter(
        (pl.col("order_status") == "delivered")
        & pl.col("order_delivered_customer_date").is_not_null()
        & _between("order_purchase_timestamp", start, _month_after(start))
    )
    seconds = (
        pl.col("order_delivered_customer_date").str.to_datetime(FMT, strict=True)
        - pl.col("order_purchase_timestamp").str.to_datetime(FMT, strict=True)
    ).dt.total_seconds()
    return delivered.select(seconds / 86400.0)[:, 0]


def delivery_review(pq: Path, *, month: datetime, previous: datetime) -> dict[str, Any]:
    """Mean delivery days of delivered orders purchased in `month` vs `previous` month."""
    orders = _t(pq, "orders")
    current, before = _delivery_days(orders, month), _delivery_days(orders, previous)
    if current.len() == 0 or before.len() == 0:
        raise ValueError(f"no delivered orders purchased in {month:%Y-%m} or {previous:%Y-%m}")
    cur, prev = float(current.mean()), float(before.mean())  # type: ignore[arg-type]
    return {
        "current_mean_days": cur,
        "previous_mean_days": prev,
        "current_delivered_orders": current.len(),
        "alert": int(cur - prev > DELIVERY_ALERT_DAYS),
    }


def _orders_per_person(pq: Path, start: datetime, end: datetime) -> pl.Series:
    orders = _t(pq, "orders").filter(_between("order_purchase_timestamp", start, end))
    people = orders.join(_t(pq, "customers"), on="customer_id", how="inner")
    if people.height != orders.height:
        raise ValueError("an order's customer_id is missing from customers")
    return people.group_by("customer_unique_id").agg(pl.col("order_id").n_unique())["order_id"]


def repeat_review(
    pq: Path, *, quarter: datetime, previous: datetime, end: datetime
) -> dict[str, Any]:
    """Repeat-person share of the people who purchased in [quarter, end) vs the previous one."""
    current = _orders_per_person(pq, quarter, end)
    before = _orders_per_person(pq, previous, quarter)
    share = float((current >= 2).mean())  # type: ignore[arg-type]
    previous_share = float((before >= 2).mean())  # type: ignore[arg-type]
    return {
        "current_persons": current.len(),
        "current_repeat_share": share,
        "current_orders_per_person": float(current.mean()),  # type: ignore[arg-type]
        "previous_repeat_share": previous_share,
        "alert": int(share - previous_share > REPEAT_ALERT_SHARE),
    }


def _seller_cents(pq: Path, start: datetime, end: datetime) -> pl.DataFrame:
    orders = _t(pq, "orders").filter(
        (pl.col("order_status") == "delivered")
        & _between("order_delivered_customer_date", start, end)
    )
    items = _t(pq, "order_items").join(orders.select("order_id"), on="order_id", how="inner")
    cents = (pl.col("price") * 100).round(0).cast(pl.Int64).sum().alias("cents")
    return items.group_by("seller_id").agg(cents)


def seller_review(pq: Path, *, week: datetime) -> dict[str, Any]:
    """The top seller of the four weeks before `week`: its revenue that week vs its baseline."""
    baseline = _seller_cents(pq, week - timedelta(weeks=4), week)
    top = baseline.sort(["cents", "seller_id"], descending=[True, False]).row(0, named=True)
    review = _seller_cents(pq, week, week + timedelta(weeks=1)).filter(
        pl.col("seller_id") == top["seller_id"]
    )
    review_cents = int(review["cents"].sum())
    weekly = top["cents"] / 4 / 100
    return {
        "top_seller_id": top["seller_id"],
        "baseline_weekly_revenue": weekly,
        "review_week_revenue": review_cents / 100,
        "alert": int(review_cents / 100 < SELLER_ALERT_FRACTION * weekly),
    }


def _d(year: int, month: int, day: int = 1) -> datetime:
    return datetime(year, month, day)


ORACLES: dict[str, Oracle] = {
    "l6_delivery_2018_06_01": partial(delivery_review, month=_d(2018, 5), previous=_d(2018, 4)),
    "l6_delivery_2018_07_01": partial(delivery_review, month=_d(2018, 6), previous=_d(2018, 5)),
    "l6_delivery_2018_07_08": partial(delivery_review, month=_d(2018, 6), previous=_d(2018, 5)),
    "l6_delivery_2018_08_01": partial(delivery_review, month=_d(2018, 7), previous=_d(2018, 6)),
    "l6_repeat_2017q3": partial(
        repeat_review, quarter=_d(2017, 7), previous=_d(2017, 4), end=_d(2017, 10)
    ),
    "l6_repeat_2017q4": partial(
        repeat_review, quarter=_d(2017, 10), previous=_d(2017, 7), end=_d(2018, 1)
    ),
    "l6_repeat_2018q1": partial(
        repeat_review, quarter=_d(2018, 1), previous=_d(2017, 10), end=_d(2018, 4)
    ),
    "l6_weekly_2018_w20": partial(seller_review, week=_d(2018, 5, 14)),
    "l6_weekly_2018_w21": partial(seller_review, week=_d(2018, 5, 21)),
    "l6_weekly_2018_w22": partial(seller_review, week=_d(2018, 5, 28)),
}
"""Scenario oracle name -> oracle over that scenario's snapshot Parquet."""
