"""Polars oracles for the level-7 (scale) scenarios over TPC-H.

Computed from the canonical Parquet with polars, not SQL: money and rates are turned into exact
integers (cents, hundredths) and summed as integers, so sums over millions of rows carry no
floating-point error; a value becomes a float only at the end. Dates are compared as dates.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import polars as pl

from scenarios.world_base import Oracle

__all__ = ["ORACLES"]

ORACLES: dict[str, Oracle] = {}


def _oracle(fn: Callable[[Path], dict[str, Any]]) -> Callable[[Path], dict[str, Any]]:
    ORACLES[fn.__name__] = fn
    return fn


def _hundredths(col: str) -> pl.Expr:
    """A DECIMAL(15,2) column as an exact Int64 count of hundredths."""
    return (pl.col(col).cast(pl.Float64) * 100).round(0).cast(pl.Int64)


def _scan(pq: Path, table: str) -> pl.LazyFrame:
    return pl.scan_parquet(pq / f"{table}.parquet")


def _lineitem(pq: Path) -> pl.LazyFrame:
    """lineitem with `price`, `disc`, `tax`, `qty` in hundredths and `net` = price*(1-disc) in
    units of 1e-4 (so `net / 10_000` is the discounted price)."""
    return (
        _scan(pq, "lineitem")
        .with_columns(
            _hundredths("l_extendedprice").alias("price"),
            _hundredths("l_discount").alias("disc"),
            _hundredths("l_tax").alias("tax"),
            _hundredths("l_quantity").alias("qty"),
        )
        .with_columns((pl.col("price") * (100 - pl.col("disc"))).alias("net"))
    )


@_oracle
def l7_q1_pricing_summary(pq: Path) -> dict[str, Any]:
    df = (
        _lineitem(pq)
        .filter(pl.col("l_shipdate") <= date(1998, 9, 2))
        .group_by("l_returnflag", "l_linestatus")
        .agg(
            pl.col("qty").sum().alias("qty"),
            pl.col("price").sum().alias("base"),
            pl.col("net").sum().alias("net"),
            (pl.col("net") * (100 + pl.col("tax"))).sum().alias("charge"),
            pl.col("disc").sum().alias("disc"),
            pl.len().alias("n"),
        )
        .sort("l_returnflag", "l_linestatus")
        .collect()
    )
    rows = [
        {
            "l_returnflag": r["l_returnflag"],
            "l_linestatus": r["l_linestatus"],
            "sum_qty": r["qty"] / 100,
            "sum_base_price": r["base"] / 100,
            "sum_disc_price": r["net"] / 10_000,
            "sum_charge": r["charge"] / 1_000_000,
            "avg_qty": r["qty"] / 100 / r["n"],
            "avg_price": r["base"] / 100 / r["n"],
            "avg_disc": r["disc"] / 100 / r["n"],
            "count_order": r["n"],
        }
        for r in df.iter_rows(named=True)
    ]
    return {"pricing_summary": rows}


@_oracle
def l7_q6_forecast_revenue_change(pq: Path) -> dict[str, Any]:
    total = (
        _lineitem(pq)
        .filter(
            (pl.col("l_shipdate") >= date(1994, 1, 1))
            & (pl.col("l_shipdate") < date(1995, 1, 1))
            & pl.col("disc").is_between(5, 7)
            & (pl.col("qty") < 2400)
        )
        .select((pl.col("price") * pl.col("disc")).sum())
        .collect()
        .item()
    )
    return {"forecast_revenue_change": total / 10_000}


@_oracle
def l7_q3_top_unshipped_orders(pq: Path) -> dict[str, Any]:
    cutoff = date(1995, 3, 15)
    customers = _scan(pq, "customer").filter(pl.col("c_mktsegment") == "BUILDING")
    orders = _scan(pq, "orders").filter(pl.col("o_orderdate") < cutoff)
    top = (
        _lineitem(pq)
        .filter(pl.col("l_shipdate") > cutoff)
        .join(orders, left_on="l_orderkey", right_on="o_orderkey")
        .join(customers, left_on="o_custkey", right_on="c_custkey")
        .group_by("l_orderkey", "o_orderdate")
        .agg(pl.col("net").sum())
        .sort(["net", "o_orderdate"], descending=[True, False])
        .head(10)
        .collect()
    )
    rows = [
        {"rank": i + 1, "l_orderkey": r["l_orderkey"], "revenue": r["net"] / 10_000}
        for i, r in enumerate(top.iter_rows(named=True))
    ]
    return {"top_unshipped_orders": rows}


@_oracle
def l7_q14_promo_revenue_share(pq: Path) -> dict[str, Any]:
    items = (
        _lineitem(pq)
        .filter(
            (pl.col("l_shipdate") >= date(1995, 9, 1)) & (pl.col("l_shipdate") < date(1995, 10, 1))
        )
        .join(_scan(pq, "part"), left_on="l_partkey", right_on="p_partkey")
        .select(
            pl.col("net").filter(pl.col("p_type").str.starts_with("PROMO")).sum().alias("promo"),
            pl.col("net").sum().alias("all"),
        )
        .collect()
    )
    return {"promo_revenue_share": items["promo"][0] / items["all"][0]}


@_oracle
def l7_q4_order_priority_checking(pq: Path) -> dict[str, Any]:
    late = (
        _scan(pq, "lineitem")
        .filter(pl.col("l_commitdate") < pl.col("l_receiptdate"))
        .select(pl.col("l_orderkey").unique())
    )
    counts = (
        _scan(pq, "orders")
        .filter(pl.col("o_orderdate").is_between(date(1993, 7, 1), date(1993, 10, 1), "left"))
        .join(late, left_on="o_orderkey", right_on="l_orderkey", how="semi")
        .group_by("o_orderpriority")
        .agg(pl.len().alias("order_count"))
        .sort("o_orderpriority")
        .collect()
    )
    return {"orders_by_priority": counts.to_dicts()}


@_oracle
def l7_q5_local_supplier_volume(pq: Path) -> dict[str, Any]:
    nations = _scan(pq, "nation").join(
        _scan(pq, "region").filter(pl.col("r_name") == "ASIA"),
        left_on="n_regionkey",
        right_on="r_regionkey",
    )
    orders = _scan(pq, "orders").filter(
        (pl.col("o_orderdate") >= date(1994, 1, 1)) & (pl.col("o_orderdate") < date(1995, 1, 1))
    )
    df = (
        _lineitem(pq)
        .join(orders, left_on="l_orderkey", right_on="o_orderkey")
        .join(_scan(pq, "customer"), left_on="o_custkey", right_on="c_custkey")
        .join(_scan(pq, "supplier"), left_on="l_suppkey", right_on="s_suppkey")
        .filter(pl.col("c_nationkey") == pl.col("s_nationkey"))
        .join(nations, left_on="s_nationkey", right_on="n_nationkey")
        .group_by("n_name")
        .agg(pl.col("net").sum())
        .sort("net", descending=True)
        .collect()
    )
    rows = [{"n_name": r["n_name"], "revenue": r["net"] / 10_000} for r in df.iter_rows(named=True)]
    return {"local_supplier_revenue": rows}


@_oracle
def l7_q12_shipping_modes(pq: Path) -> dict[str, Any]:
    high = pl.col("o_orderpriority").is_in(["1-URGENT", "2-HIGH"])
    df = (
        _scan(pq, "lineitem")
        .filter(
            pl.col("l_shipmode").is_in(["MAIL", "SHIP"])
            & (pl.col("l_commitdate") < pl.col("l_receiptdate"))
            & (pl.col("l_shipdate") < pl.col("l_commitdate"))
            & (pl.col("l_receiptdate") >= date(1994, 1, 1))
            & (pl.col("l_receiptdate") < date(1995, 1, 1))
        )
        .join(_scan(pq, "orders"), left_on="l_orderkey", right_on="o_orderkey")
        .group_by("l_shipmode")
        .agg(
            high.sum().cast(pl.Int64).alias("high_line_count"),
            (~high).sum().cast(pl.Int64).alias("low_line_count"),
        )
        .sort("l_shipmode")
        .collect()
    )
    return {"lines_by_ship_mode": df.to_dicts()}


@_oracle
def l7_customers_without_orders(pq: Path) -> dict[str, Any]:
    buyers = _scan(pq, "orders").select(pl.col("o_custkey").unique())
    count = (
        _scan(pq, "customer")
        .join(buyers, left_on="c_custkey", right_on="o_custkey", how="anti")
        .select(pl.len())
        .collect()
        .item()
    )
    return {"customers_without_orders": count}
