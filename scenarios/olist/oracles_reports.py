"""Polars oracles for the level 5 standing-report scenarios: one metric per report line.

Registered in `scenarios.olist.oracles.ORACLES` through its `@oracle` decorator; imported at
the end of that module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from scenarios.olist.oracle_base import cents, oracle, parsed_time, purchased_orders, table
from scenarios.olist.oracles_more import delivered_in, in_window

__all__: list[str] = []


def _money(values: pl.Series) -> int:
    """Whole cents of a two-decimal money column's sum."""
    return int((values * 100).round(0).cast(pl.Int64).sum())


@oracle
def l5_monthly_delivery_report_2018_06(pq: Path) -> dict[str, Any]:
    june = delivered_in(pq, "2018-06-01", "2018-07-01")
    timed = june.filter(pl.col("order_delivered_customer_date").is_not_null()).with_columns(
        parsed_time("order_delivered_customer_date").alias("delivered"),
        parsed_time("order_estimated_delivery_date").alias("estimated"),
    )
    days = (pl.col("delivered") - pl.col("purchased")).dt.total_seconds() / 86400
    reviews = table(pq, "order_reviews").join(timed.select("order_id"), on="order_id", how="semi")
    return {
        "delivered_orders": june.height,
        "delivered_without_timestamp": june.height - timed.height,
        "mean_delivery_days": timed.select(days.mean()).item(),
        "late_share": timed.filter(pl.col("delivered") > pl.col("estimated")).height / timed.height,
        "average_review_score": reviews["review_score"].mean(),
        "orders_without_review": timed.join(reviews, on="order_id", how="anti").height,
    }


@oracle
def l5_quarterly_repeat_report_2018_q1(pq: Path) -> dict[str, Any]:
    orders = purchased_orders(pq).join(table(pq, "customers"), on="customer_id", how="inner")
    quarter = orders.filter(in_window("2018-01-01", "2018-04-01"))
    per = quarter.group_by("customer_unique_id").agg(pl.col("order_id").n_unique().alias("n"))
    earlier = orders.filter(pl.col("purchased") < pl.datetime(2018, 1, 1))
    returning = per.join(earlier, on="customer_unique_id", how="semi").height
    return {
        "orders": quarter["order_id"].n_unique(),
        "persons": per.height,
        "repeat_person_share": per.filter(pl.col("n") >= 2).height / per.height,
        "mean_orders_per_person": per["n"].sum() / per.height,
        "returning_persons": returning,
        "returning_person_share": returning / per.height,
    }


@oracle
def l5_category_revenue_report_2018(pq: Path) -> dict[str, Any]:
    items = (
        table(pq, "order_items")
        .join(delivered_in(pq, "2018-01-01", "2019-01-01"), on="order_id", how="semi")
        .join(table(pq, "products"), on="product_id", how="inner")
    )
    translated = table(pq, "product_category_name_translation")["product_category_name"]
    cat = pl.col("product_category_name")
    per = (
        items.filter(cat.is_not_null())
        .group_by("product_category_name")
        .agg(cents("price").alias("revenue"))
    )
    best = per.filter(pl.col("revenue") == pl.col("revenue").max())
    untranslated = items.filter(cat.is_not_null() & ~cat.is_in(translated.implode()))
    return {
        "delivered_item_revenue": _money(items["price"]) / 100,
        "categories_with_revenue": per.height,
        "top_category": min(best["product_category_name"].to_list()),
        "top_category_revenue": float(best["revenue"][0]),
        "untranslated_category_revenue": _money(untranslated["price"]) / 100,
        "missing_category_revenue": _money(items.filter(cat.is_null())["price"]) / 100,
    }


@oracle
def l5_seller_report_2017(pq: Path) -> dict[str, Any]:
    items = table(pq, "order_items").join(
        delivered_in(pq, "2017-01-01", "2018-01-01"), on="order_id", how="semi"
    )
    per = items.group_by("seller_id").agg(
        cents("price").alias("revenue"), pl.col("order_id").n_unique().alias("orders")
    )
    revenue = _money(items["price"]) / 100
    return {
        "active_sellers": per.height,
        "item_revenue": revenue,
        "mean_revenue_per_seller": revenue / per.height,
        "top_seller_revenue_share": per.select(pl.col("revenue").max()).item() / revenue,
        "sellers_with_10_orders": per.filter(pl.col("orders") >= 10).height,
    }


@oracle
def l5_payments_report_2018(pq: Path) -> dict[str, Any]:
    in_2018 = purchased_orders(pq).filter(in_window("2018-01-01", "2019-01-01"))
    pay = table(pq, "order_payments").join(in_2018, on="order_id", how="semi")
    card = pay.filter(pl.col("payment_type") == "credit_card")
    total = _money(pay["payment_value"])
    return {
        "payment_rows": pay.height,
        "total_payment_value": total / 100,
        "credit_card_value_share": _money(card["payment_value"]) / total,
        "mean_credit_card_installments": card["payment_installments"].mean(),
        "orders_with_voucher": pay.filter(pl.col("payment_type") == "voucher")[
            "order_id"
        ].n_unique(),
        "orders_with_several_payments": pay.group_by("order_id")
        .len()
        .filter(pl.col("len") > 1)
        .height,
    }


@oracle
def l5_satisfaction_report_2017_q4(pq: Path) -> dict[str, Any]:
    q4 = purchased_orders(pq).filter(in_window("2017-10-01", "2018-01-01"))
    rv = table(pq, "order_reviews").join(q4, on="order_id", how="semi")
    per = rv.group_by("order_id").len()
    return {
        "review_rows": rv.height,
        "reviewed_orders": per.height,
        "average_review_score": rv["review_score"].mean(),
        "low_score_share": rv.filter(pl.col("review_score") <= 2).height / rv.height,
        "comment_share": rv["review_comment_message"].is_not_null().sum() / rv.height,
        "orders_with_several_reviews": per.filter(pl.col("len") > 1).height,
    }


@oracle
def l5_freight_report_2018_h1(pq: Path) -> dict[str, Any]:
    items = table(pq, "order_items").join(
        delivered_in(pq, "2018-01-01", "2018-07-01"), on="order_id", how="semi"
    )
    price, freight = _money(items["price"]), _money(items["freight_value"])
    orders = items["order_id"].n_unique()
    return {
        "delivered_orders": orders,
        "item_revenue": price / 100,
        "freight_revenue": freight / 100,
        "freight_share": freight / (price + freight),
        "mean_freight_per_order": freight / 100 / orders,
        "zero_freight_items": items.filter(pl.col("freight_value") == 0).height,
    }
