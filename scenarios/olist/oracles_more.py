"""Polars oracles for the wider level 1-3 Olist scenarios (time windows, grain, duplicates,
rankings with ties, missing and untranslated values, freight).

Registered in `scenarios.olist.oracles.ORACLES` through its `@oracle` decorator; imported at
the end of that module. Windows are compared as parsed datetimes, half-open, so the SQLite
check queries (which compare the stored text) are an independent computation.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl

from scenarios.olist.oracle_base import (
    FMT,
    cents,
    oracle,
    parsed_time,
    purchased_orders,
    sorted_rows,
    table,
)

__all__ = ["delivered_in", "in_window"]


def in_window(start: str, end: str) -> pl.Expr:
    """Purchased in the half-open window [start, end) (dates as `YYYY-MM-DD`)."""
    lo, hi = datetime.fromisoformat(start), datetime.fromisoformat(end)
    return (pl.col("purchased") >= lo) & (pl.col("purchased") < hi)


def delivered_in(pq: Path, start: str, end: str) -> pl.DataFrame:
    """Delivered orders purchased in [start, end), with parsed purchase time."""
    return purchased_orders(pq).filter(
        (pl.col("order_status") == "delivered") & in_window(start, end)
    )


def _items_of(pq: Path, orders: pl.DataFrame) -> pl.DataFrame:
    return table(pq, "order_items").join(orders.select("order_id"), on="order_id", how="semi")


def _per_order(rows: pl.DataFrame) -> tuple[int, int]:
    """(orders with a row, orders with several rows) of a table keyed by `order_id`."""
    per = rows.group_by("order_id").len()
    return per.height, per.filter(pl.col("len") > 1).height


_HAS_DELIVERY = pl.col("order_delivered_customer_date").is_not_null()
"""The order has a customer delivery timestamp."""


def _competition_rank(col: str) -> pl.Expr:
    """1 + the number of rows with a strictly larger value (ties share the lowest rank)."""
    return pl.col(col).rank(method="min", descending=True).cast(pl.Int64)


# --- level 1 ----------------------------------------------------------------------------------
@oracle
def l1_orders_july_2018(pq: Path) -> dict[str, Any]:
    o = purchased_orders(pq)
    july = o.filter(in_window("2018-07-01", "2018-08-01"))
    last_day = july.filter(pl.col("purchased").dt.date() == datetime(2018, 7, 31).date())
    return {
        "orders_purchased_2018_07": july["order_id"].n_unique(),
        "orders_purchased_2018_07_31": last_day["order_id"].n_unique(),
    }


@oracle
def l1_item_grain(pq: Path) -> dict[str, Any]:
    items = table(pq, "order_items")
    orders, several = _per_order(items)
    return {
        "item_rows": items.height,
        "orders_with_items": orders,
        "mean_items_per_order": items.height / orders,
        "orders_with_several_items": several,
    }


@oracle
def l1_several_payments(pq: Path) -> dict[str, Any]:
    p = table(pq, "order_payments")
    orders, several = _per_order(p)
    return {
        "payment_rows": p.height,
        "orders_with_payments": orders,
        "orders_with_several_payments": several,
        "orders_with_voucher": p.filter(pl.col("payment_type") == "voucher")["order_id"].n_unique(),
    }


@oracle
def l1_persons_by_state_rank(pq: Path) -> dict[str, Any]:
    per = (
        table(pq, "customers")
        .group_by("customer_state")
        .agg(pl.col("customer_unique_id").n_unique().alias("persons"))
        .with_columns(_competition_rank("persons").alias("state_rank"))
    )
    return {"persons_by_state_rank": sorted_rows(per, ["customer_state"])}


@oracle
def l1_products_missing_attributes(pq: Path) -> dict[str, Any]:
    p = table(pq, "products")
    return {
        "products": p.height,
        "products_without_category": p["product_category_name"].null_count(),
        "products_without_weight": p["product_weight_g"].null_count(),
    }


@oracle
def l1_purchase_span(pq: Path) -> dict[str, Any]:
    purchased = purchased_orders(pq)["purchased"]
    first, last = purchased.min(), purchased.max()
    assert isinstance(first, datetime)
    assert isinstance(last, datetime)
    return {
        "first_purchase_timestamp": first.strftime(FMT),
        "last_purchase_timestamp": last.strftime(FMT),
        "purchase_span_days": (last - first).total_seconds() / 86400,
    }


# --- level 2 ----------------------------------------------------------------------------------
@oracle
def l2_top_category_2018_05(pq: Path) -> dict[str, Any]:
    items = _items_of(pq, delivered_in(pq, "2018-05-01", "2018-06-01"))
    per = (
        items.join(table(pq, "products"), on="product_id", how="inner")
        .filter(pl.col("product_category_name").is_not_null())
        .group_by("product_category_name")
        .len()
    )
    top = per.filter(pl.col("len") == pl.col("len").max())
    return {
        "top_category": sorted(top["product_category_name"].to_list())[0],
        "top_category_items": int(top["len"][0]),
        "categories_tied_at_top": top.height,
    }


@oracle
def l2_seller_rank_2018(pq: Path) -> dict[str, Any]:
    items = _items_of(pq, delivered_in(pq, "2018-01-01", "2019-01-01"))
    per = (
        items.group_by("seller_id")
        .agg(pl.col("order_id").n_unique().alias("delivered_orders"))
        .with_columns(_competition_rank("delivered_orders").alias("seller_rank"))
        .filter(pl.col("seller_rank") <= 11)
    )
    return {"top_sellers_2018": sorted_rows(per, ["seller_id"])}


@oracle
def l2_revenue_by_month_2018_q1(pq: Path) -> dict[str, Any]:
    orders = delivered_in(pq, "2018-01-01", "2018-04-01")
    revenue = _items_of(pq, orders).group_by("order_id").agg(cents("price").alias("rev"))
    per = (
        orders.join(revenue, on="order_id", how="left")
        .group_by(pl.col("month").alias("purchase_month"))
        .agg(
            pl.len().alias("delivered_orders"),
            ((pl.col("rev").fill_null(0.0) * 100).round(0).sum() / 100).alias("item_revenue"),
        )
    )
    return {"delivered_revenue_by_month": sorted_rows(per, ["purchase_month"])}


@oracle
def l2_freight_heavy_orders_2018(pq: Path) -> dict[str, Any]:
    items = _items_of(pq, delivered_in(pq, "2018-01-01", "2019-01-01"))
    per = items.group_by("order_id").agg(
        cents("price").alias("price"), cents("freight_value").alias("freight")
    )
    heavy = per.filter((pl.col("freight") * 100).round(0) > (pl.col("price") * 100).round(0))
    return {
        "delivered_orders_with_items": per.height,
        "freight_heavy_orders": heavy.height,
        "freight_heavy_share": heavy.height / per.height,
    }


@oracle
def l2_category_grain_2018(pq: Path) -> dict[str, Any]:
    orders = delivered_in(pq, "2018-01-01", "2019-01-01")
    items = (
        _items_of(pq, orders)
        .join(table(pq, "products"), on="product_id", how="inner")
        .filter(pl.col("product_category_name") == "beleza_saude")
        .join(orders.select("order_id", "customer_id"), on="order_id", how="inner")
        .join(table(pq, "customers"), on="customer_id", how="inner")
    )
    return {
        "item_rows": items.height,
        "orders": items["order_id"].n_unique(),
        "persons": items["customer_unique_id"].n_unique(),
        "item_revenue": items.select(cents("price")).item(),
    }


@oracle
def l2_review_by_lateness_2017(pq: Path) -> dict[str, Any]:
    cohort = (
        delivered_in(pq, "2017-01-01", "2018-01-01")
        .filter(_HAS_DELIVERY)
        .with_columns(
            (
                parsed_time("order_delivered_customer_date")
                > parsed_time("order_estimated_delivery_date")
            ).alias("late")
        )
    )
    reviews = table(pq, "order_reviews").join(cohort.select("order_id", "late"), on="order_id")
    late = pl.col("late")
    return {
        "late_orders": cohort.filter(late).height,
        "on_time_orders": cohort.filter(~late).height,
        "late_average_review_score": reviews.filter(late)["review_score"].mean(),
        "on_time_average_review_score": reviews.filter(~late)["review_score"].mean(),
    }


# --- level 3 ----------------------------------------------------------------------------------
@oracle
def l3_latest_review_per_order(pq: Path) -> dict[str, Any]:
    r = table(pq, "order_reviews")
    latest = r.sort(
        ["order_id", "review_creation_date", "review_answer_timestamp", "review_id"],
        descending=[False, True, True, True],
        nulls_last=True,
    ).unique(subset="order_id", keep="first", maintain_order=True)
    return {
        "review_rows": r.height,
        "reviewed_orders": latest.height,
        "average_latest_review_score": latest["review_score"].mean(),
    }


@oracle
def l3_late_by_calendar_day_2018(pq: Path) -> dict[str, Any]:
    o = (
        delivered_in(pq, "2018-01-01", "2019-01-01")
        .filter(_HAS_DELIVERY)
        .with_columns(
            parsed_time("order_delivered_customer_date").alias("delivered"),
            parsed_time("order_estimated_delivery_date").alias("estimated"),
        )
    )
    by_day = pl.col("delivered").dt.date() > pl.col("estimated").dt.date()
    return {
        "delivered_orders": o.height,
        "late_by_timestamp": o.filter(pl.col("delivered") > pl.col("estimated")).height,
        "late_by_calendar_day": o.filter(by_day).height,
    }


@oracle
def l3_delivery_days_2017_coverage(pq: Path) -> dict[str, Any]:
    o = delivered_in(pq, "2017-01-01", "2018-01-01")
    timed = o.filter(_HAS_DELIVERY).with_columns(
        (
            (parsed_time("order_delivered_customer_date") - pl.col("purchased")).dt.total_seconds()
            / 86400
        ).alias("days")
    )
    return {
        "delivered_orders": o.height,
        "delivered_without_timestamp": o.height - timed.height,
        "mean_delivery_days": timed["days"].mean(),
    }


@oracle
def l3_category_revenue_labelled_2018(pq: Path) -> dict[str, Any]:
    items = _items_of(pq, delivered_in(pq, "2018-01-01", "2019-01-01")).join(
        table(pq, "products"), on="product_id", how="inner"
    )
    labelled = items.join(
        table(pq, "product_category_name_translation"), on="product_category_name", how="left"
    ).with_columns(
        pl.when(pl.col("product_category_name").is_null())
        .then(pl.lit("unknown"))
        .when(pl.col("product_category_name_english").is_null())
        .then(pl.col("product_category_name"))
        .otherwise(pl.col("product_category_name_english"))
        .alias("category_label")
    )
    per = labelled.group_by("category_label").agg(cents("price").alias("item_revenue"))
    return {"revenue_by_category_label": sorted_rows(per, ["category_label"])}
