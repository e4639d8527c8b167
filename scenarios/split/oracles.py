"""Polars oracles for the level-4 (cross-store) scenarios over the split Olist world.

Each reads the canonical Parquet of all eight tables (no SQL) and returns metric name -> value;
table metrics are row dicts in the scenario's key order. Definitions: delivered means
`order_status = 'delivered'`; item revenue is the sum of `price` in BRL, freight excluded; a
purchase year is that of `order_purchase_timestamp`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from scenarios.world_base import Oracle

__all__ = ["ORACLES"]

ORACLES: dict[str, Oracle] = {}


def _oracle(fn: Callable[[Path], dict[str, Any]]) -> Callable[[Path], dict[str, Any]]:
    ORACLES[fn.__name__] = fn
    return fn


def _t(pq: Path, table: str) -> pl.DataFrame:
    return pl.read_parquet(pq / f"{table}.parquet")


def _delivered_items(pq: Path) -> pl.DataFrame:
    """Items of delivered orders with purchase year, customer state, product and seller."""
    orders = (
        _t(pq, "orders")
        .filter(pl.col("order_status") == "delivered")
        .with_columns(
            pl.col("order_purchase_timestamp")
            .str.to_datetime("%Y-%m-%d %H:%M:%S", strict=True)
            .dt.year()
            .alias("year")
        )
        .join(_t(pq, "customers").select("customer_id", "customer_state"), on="customer_id")
        .select("order_id", "year", "customer_state")
    )
    products = _t(pq, "products").join(
        _t(pq, "product_category_name_translation"), on="product_category_name", how="left"
    )
    return (
        _t(pq, "order_items")
        .join(orders, on="order_id")
        .join(products, on="product_id", how="left")
        .join(_t(pq, "sellers").select("seller_id", "seller_state"), on="seller_id", how="left")
    )


def _exact_sum(column: str) -> pl.Expr:
    """A sum of money in exact hundredths (float sums depend on polars' summation order)."""
    return (pl.col(column) * 100).round(0).cast(pl.Int64).sum() / 100


def _english_revenue(items: pl.DataFrame) -> pl.DataFrame:
    return (
        items.filter(pl.col("product_category_name_english").is_not_null())
        .group_by("product_category_name_english")
        .agg(_exact_sum("price").alias("revenue"))
    )


@_oracle
def l4_revenue_by_english_category(pq: Path) -> dict[str, Any]:
    df = _english_revenue(_delivered_items(pq)).sort("product_category_name_english")
    return {"english_category_revenue": df.to_dicts()}


@_oracle
def l4_top_english_categories_2017(pq: Path) -> dict[str, Any]:
    items = _delivered_items(pq).filter(pl.col("year") == 2017)
    top = _english_revenue(items).sort("revenue", descending=True).head(5)
    top = top.with_columns(pl.int_range(1, pl.len() + 1).alias("rank"))
    return {"top_categories_2017": top.select("rank", "product_category_name_english", "revenue")
            .to_dicts()}  # fmt: skip


@_oracle
def l4_top_seller_state_revenue(pq: Path) -> dict[str, Any]:
    by_state = (
        _delivered_items(pq)
        .group_by("seller_state")
        .agg(_exact_sum("price").alias("revenue"))
        .sort("revenue", descending=True)
    )
    top = by_state.row(0, named=True)
    return {"top_seller_state": top["seller_state"], "top_seller_state_revenue": top["revenue"]}


@_oracle
def l4_untranslated_share_delivered(pq: Path) -> dict[str, Any]:
    items = _delivered_items(pq)
    untranslated = items.filter(
        pl.col("product_category_name").is_not_null()
        & pl.col("product_category_name_english").is_null()
    ).height
    return {
        "untranslated_item_share": untranslated / items.height,
        "untranslated_items": untranslated,
    }


@_oracle
def l4_same_state_share_delivered(pq: Path) -> dict[str, Any]:
    items = _delivered_items(pq)
    same = items.filter(pl.col("seller_state") == pl.col("customer_state")).height
    return {"same_state_item_share": same / items.height}


@_oracle
def l4_heavy_item_freight_2018(pq: Path) -> dict[str, Any]:
    heavy = _delivered_items(pq).filter(
        (pl.col("year") == 2018) & (pl.col("product_weight_g") > 10_000)
    )
    return {
        "heavy_item_rows_2018": heavy.height,
        "heavy_item_freight_2018": heavy["freight_value"].sum(),
    }


@_oracle
def l4_health_beauty_review_score(pq: Path) -> dict[str, Any]:
    orders = (
        _delivered_items(pq)
        .filter(pl.col("product_category_name_english") == "health_beauty")
        .select("order_id")
        .unique()
    )
    reviews = _t(pq, "order_reviews").join(orders, on="order_id")
    return {"health_beauty_review_score": reviews["review_score"].mean()}


@_oracle
def l4_sp_sellers_shipping_out_of_state(pq: Path) -> dict[str, Any]:
    items = _delivered_items(pq).filter(
        (pl.col("seller_state") == "SP") & (pl.col("customer_state") != "SP")
    )
    return {"sp_sellers_out_of_state": items["seller_id"].n_unique()}
