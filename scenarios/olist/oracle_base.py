"""The Olist oracles' registry and the helpers they share: reading a canonical Parquet table,
parsing its timestamps, orders with purchase year and month, sorted rows, exact money sums.

Oracles read the canonical Parquet only (no SQL); `oracle` registers a function under its own
name, which is the scenario's `oracle_name`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from scenarios.world_base import Oracle

__all__ = [
    "FMT",
    "ORACLES",
    "cents",
    "oracle",
    "parsed_time",
    "purchased_orders",
    "sorted_rows",
    "table",
]

ORACLES: dict[str, Oracle] = {}
"""Oracle name -> function; the references build looks scenarios' oracles up here."""

FMT = "%Y-%m-%d %H:%M:%S"


def oracle(fn: Callable[[Path], dict[str, Any]]) -> Callable[[Path], dict[str, Any]]:
    """Register `fn` under its own name."""
    if fn.__name__ in ORACLES:
        raise ValueError(f"oracle {fn.__name__!r} is registered twice")
    ORACLES[fn.__name__] = fn
    return fn


def table(pq: Path, table: str) -> pl.DataFrame:
    return pl.read_parquet(pq / f"{table}.parquet")


def parsed_time(col: str) -> pl.Expr:
    return pl.col(col).str.to_datetime(FMT, strict=True)


def purchased_orders(pq: Path) -> pl.DataFrame:
    """Orders with parsed purchase time, purchase year and `YYYY-MM` month."""
    return (
        table(pq, "orders")
        .with_columns(
            parsed_time("order_purchase_timestamp").alias("purchased"),
        )
        .with_columns(
            pl.col("purchased").dt.year().alias("year"),
            pl.col("purchased").dt.strftime("%Y-%m").alias("month"),
        )
    )


def sorted_rows(df: pl.DataFrame, key: list[str]) -> list[dict[str, Any]]:
    return df.sort(key, nulls_last=True).to_dicts()


def cents(col: str) -> pl.Expr:
    """Sum of a two-decimal money column, exactly (via whole cents)."""
    return (pl.col(col) * 100).round(0).cast(pl.Int64).sum() / 100
