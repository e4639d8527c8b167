"""Polars oracles for the Olist scenarios: one function per answerable scenario.

Each oracle reads the canonical Parquet only (no SQL) and returns metric name -> value; table
metrics are lists of row dicts sorted by their key. A function's name is the scenario's
`oracle_name` (its id with `-` and `.` as `_`). The SQLite `check_sql` of each scenario is
written separately and must agree at build time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from scenarios.olist.oracle_base import (
    ORACLES,
    cents,
    oracle,
    parsed_time,
    purchased_orders,
    sorted_rows,
    table,
)

__all__ = ["ORACLES", "oracle"]


def _delivered_items(pq: Path) -> pl.DataFrame:
    delivered = purchased_orders(pq).filter(pl.col("order_status") == "delivered")
    return table(pq, "order_items").join(
        delivered.select("order_id", "customer_id", "year"), on="order_id", how="inner"
    )


def _one(df: pl.DataFrame) -> dict[str, Any]:
    if df.height != 1:
        raise ValueError(f"expected one result row, got {df.height}")
    return df.to_dicts()[0]


# --- level 1: one table ---------------------------------------------------------------------
@oracle
def l1_delivered_orders(pq: Path) -> dict[str, Any]:
    orders = table(pq, "orders")
    return {"delivered_orders": orders.filter(pl.col("order_status") == "delivered").height}


@oracle
def l1_canceled_orders_2018(pq: Path) -> dict[str, Any]:
    o = purchased_orders(pq).filter(
        (pl.col("order_status") == "canceled") & (pl.col("year") == 2018)
    )
    return {"canceled_orders_2018": o["order_id"].n_unique()}


@oracle
def l1_orders_by_status(pq: Path) -> dict[str, Any]:
    counts = table(pq, "orders").group_by("order_status").agg(pl.len().alias("orders"))
    return {"orders_by_status": sorted_rows(counts, ["order_status"])}


@oracle
def l1_average_review_score(pq: Path) -> dict[str, Any]:
    return {"average_review_score": table(pq, "order_reviews")["review_score"].mean()}


@oracle
def l1_distinct_persons(pq: Path) -> dict[str, Any]:
    c = table(pq, "customers")
    return {
        "distinct_customer_ids": c["customer_id"].n_unique(),
        "distinct_persons": c["customer_unique_id"].n_unique(),
    }


@oracle
def l1_payments_by_type(pq: Path) -> dict[str, Any]:
    p = (
        table(pq, "order_payments")
        .group_by("payment_type")
        .agg(pl.len().alias("payment_rows"), cents("payment_value").alias("total_payment_value"))
    )
    return {"payments_by_type": sorted_rows(p, ["payment_type"])}


@oracle
def l1_orders_purchased_2017(pq: Path) -> dict[str, Any]:
    return {"orders_purchased_2017": purchased_orders(pq).filter(pl.col("year") == 2017).height}


# --- level 2: joins and several steps ---------------------------------------------------------
@oracle
def l2_category_revenue(pq: Path) -> dict[str, Any]:
    items = _delivered_items(pq).join(table(pq, "products"), on="product_id", how="left")
    per = (
        items.filter(pl.col("product_category_name").is_not_null())
        .group_by("product_category_name")
        .agg(cents("price").alias("revenue"))
        .join(
            table(pq, "product_category_name_translation"), on="product_category_name", how="left"
        )
        .select("product_category_name", "product_category_name_english", "revenue")
    )
    return {"category_revenue": sorted_rows(per, ["product_category_name"])}


@oracle
def l2_category_revenue_disclosure(pq: Path) -> dict[str, Any]:
    translated = table(pq, "product_category_name_translation")["product_category_name"]
    items = _delivered_items(pq).join(table(pq, "products"), on="product_id", how="left")
    cat = pl.col("product_category_name")
    untranslated = items.filter(cat.is_not_null() & ~cat.is_in(translated.implode()))
    return {
        "delivered_item_revenue": items.select(cents("price")).item(),
        "untranslated_category_revenue": untranslated.select(cents("price")).item(),
        "missing_category_revenue": items.filter(cat.is_null()).select(cents("price")).item(),
    }


def _repeat(orders: pl.DataFrame, customers: pl.DataFrame) -> dict[str, Any]:
    per_person = (
        orders.join(customers, on="customer_id", how="inner")
        .group_by("customer_unique_id")
        .agg(pl.col("order_id").n_unique().alias("n"))
    )
    persons = per_person.height
    return {
        "persons": persons,
        "repeat_person_share": per_person.filter(pl.col("n") >= 2).height / persons,
        "mean_orders_per_person": per_person["n"].sum() / persons,
    }


@oracle
def l2_repeat_purchasing(pq: Path) -> dict[str, Any]:
    return _repeat(table(pq, "orders"), table(pq, "customers"))


@oracle
def l2_repeat_purchasing_2017(pq: Path) -> dict[str, Any]:
    return _repeat(purchased_orders(pq).filter(pl.col("year") == 2017), table(pq, "customers"))


@oracle
def l2_delivery_report_2018_03(pq: Path) -> dict[str, Any]:
    o = (
        purchased_orders(pq)
        .filter(
            (pl.col("order_status") == "delivered")
            & (pl.col("month") == "2018-03")
            & pl.col("order_delivered_customer_date").is_not_null()
        )
        .with_columns(
            parsed_time("order_delivered_customer_date").alias("delivered"),
            parsed_time("order_estimated_delivery_date").alias("estimated"),
        )
        .with_columns(
            ((pl.col("delivered") - pl.col("purchased")).dt.total_seconds() / 86400).alias("days")
        )
    )
    reviews = table(pq, "order_reviews").join(o.select("order_id"), on="order_id", how="semi")
    return {
        "delivered_orders": o.height,
        "mean_delivery_days": o["days"].mean(),
        "late_share": o.filter(pl.col("delivered") > pl.col("estimated")).height / o.height,
        "average_review_score": reviews["review_score"].mean(),
        "orders_without_review": o.join(reviews, on="order_id", how="anti").height,
    }


@oracle
def l2_top_seller_revenue(pq: Path) -> dict[str, Any]:
    per = _delivered_items(pq).group_by("seller_id").agg(cents("price").alias("revenue"))
    best = per.filter(pl.col("revenue") == pl.col("revenue").max())
    if best.height != 1:
        raise ValueError(f"top seller is not unique: {best.to_dicts()}")
    row = best.to_dicts()[0]
    return {"top_seller_id": row["seller_id"], "top_seller_revenue": row["revenue"]}


@oracle
def l2_revenue_by_customer_state(pq: Path) -> dict[str, Any]:
    items = _delivered_items(pq).join(table(pq, "customers"), on="customer_id", how="left")
    per = items.group_by("customer_state").agg(
        pl.col("order_id").n_unique().alias("delivered_orders"), cents("price").alias("revenue")
    )
    return {"revenue_by_customer_state": sorted_rows(per, ["customer_state"])}


@oracle
def l2_freight_vs_item_revenue_2017(pq: Path) -> dict[str, Any]:
    items = _delivered_items(pq).filter(pl.col("year") == 2017)
    item_rev = items.select(cents("price")).item()
    freight = items.select(cents("freight_value")).item()
    return {
        "item_revenue": item_rev,
        "freight_revenue": freight,
        "freight_share": freight / (item_rev + freight),
    }


@oracle
def l2_delivered_orders_by_month_2017(pq: Path) -> dict[str, Any]:
    o = purchased_orders(pq).filter(
        (pl.col("order_status") == "delivered") & (pl.col("year") == 2017)
    )
    per = o.group_by(pl.col("month").alias("purchase_month")).agg(
        pl.len().alias("delivered_orders")
    )
    return {"delivered_orders_by_month": sorted_rows(per, ["purchase_month"])}


@oracle
def l2_average_order_value_2018(pq: Path) -> dict[str, Any]:
    items = _delivered_items(pq).filter(pl.col("year") == 2018)
    per_order = items.group_by("order_id").agg(
        (pl.col("price") + pl.col("freight_value")).sum().alias("value")
    )
    return {
        "delivered_orders": per_order.height,
        "average_order_value": per_order["value"].mean(),
    }


# --- level 3: messy data and grain traps -------------------------------------------------------
@oracle
def l3_orders_with_several_reviews(pq: Path) -> dict[str, Any]:
    r = table(pq, "order_reviews")
    per = r.group_by("order_id").agg(pl.len().alias("n"))
    return {
        "review_rows": r.height,
        "reviewed_orders": per.height,
        "orders_with_several_reviews": per.filter(pl.col("n") > 1).height,
    }


@oracle
def l3_delivered_without_review(pq: Path) -> dict[str, Any]:
    delivered = table(pq, "orders").filter(pl.col("order_status") == "delivered")
    missing = delivered.join(table(pq, "order_reviews"), on="order_id", how="anti").height
    return {
        "delivered_orders_without_review": missing,
        "share_without_review": missing / delivered.height,
    }


@oracle
def l3_untranslated_category_items(pq: Path) -> dict[str, Any]:
    translated = table(pq, "product_category_name_translation")["product_category_name"]
    products = table(pq, "products")
    cat = pl.col("product_category_name")
    untranslated_products = products.filter(cat.is_not_null() & ~cat.is_in(translated.implode()))
    items = table(pq, "order_items")
    missing_products = products.filter(cat.is_null())
    return {
        "untranslated_category_items": items.join(
            untranslated_products, on="product_id", how="semi"
        ).height,
        "missing_category_items": items.join(missing_products, on="product_id", how="semi").height,
        "untranslated_categories": untranslated_products["product_category_name"].n_unique(),
    }


@oracle
def l3_delivered_missing_timestamp(pq: Path) -> dict[str, Any]:
    o = table(pq, "orders")
    ts = pl.col("order_delivered_customer_date")
    delivered = pl.col("order_status") == "delivered"
    return {
        "delivered_without_timestamp": o.filter(delivered & ts.is_null()).height,
        "undelivered_with_timestamp": o.filter(~delivered & ts.is_not_null()).height,
    }


@oracle
def l3_shared_review_ids(pq: Path) -> dict[str, Any]:
    r = table(pq, "order_reviews")
    per_id = r.group_by("review_id").agg(pl.col("order_id").n_unique().alias("orders"))
    return {
        "review_rows": r.height,
        "distinct_review_ids": per_id.height,
        "review_ids_on_several_orders": per_id.filter(pl.col("orders") > 1).height,
    }


@oracle
def l3_payment_total_delivered_2018(pq: Path) -> dict[str, Any]:
    o = purchased_orders(pq).filter(
        (pl.col("order_status") == "delivered") & (pl.col("year") == 2018)
    )
    payments = table(pq, "order_payments").join(o.select("order_id"), on="order_id", how="semi")
    items = table(pq, "order_items").join(o.select("order_id"), on="order_id", how="semi")
    return {
        "delivered_orders": o.height,
        "total_payment_value": payments.select(cents("payment_value")).item(),
        "item_rows": items.height,
    }


# --- more scenarios, registered by importing their modules (kept apart for size) --------------
from scenarios.olist import oracles_more, oracles_reports  # noqa: E402, F401
