"""The prediction tasks on the Olist world: one cohort frame per task, built from the truth.

Every frame has one row per entity (an order) with the entity's group (the person,
`customer_unique_id`, whose orders must all fall on one side of a split), the instant the
prediction is made (`at`), the instant the label becomes known (`label_at`), the features known
at `at`, and the label. `scenarios.predict.world` splits each frame by time into a training cohort
(with labels, in the store) and a scoring cohort (without labels, which stay with the evaluator).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import polars as pl

__all__ = ["TASKS", "Task", "order_facts"]

FMT = "%Y-%m-%d %H:%M:%S"
TRAIN_FROM = datetime(2017, 1, 1)
SCORE_FROM = datetime(2018, 4, 1)
"""Training entities are predicted (and their labels known) before this instant, scoring
entities from it on."""
SCORE_TO = datetime(2018, 6, 1)

Tables = dict[str, pl.DataFrame]


def _days(later: str, earlier: str) -> pl.Expr:
    return (pl.col(later) - pl.col(earlier)).dt.total_seconds() / 86400.0


def order_facts(t: Tables) -> pl.DataFrame:
    """Delivered orders with a recorded delivery: timestamps, basket and latest review."""
    times = [
        "order_purchase_timestamp",
        "order_approved_at",
        "order_delivered_carrier_date",
        "order_delivered_customer_date",
        "order_estimated_delivery_date",
    ]
    orders = (
        t["orders"]
        .filter(
            (pl.col("order_status") == "delivered")
            & pl.col("order_delivered_customer_date").is_not_null()
            & pl.col("order_delivered_carrier_date").is_not_null()
            & pl.col("order_approved_at").is_not_null()
        )
        .with_columns(pl.col(c).str.to_datetime(FMT, strict=True) for c in times)
        .join(t["customers"].select("customer_id", "customer_unique_id"), on="customer_id")
    )
    basket = (
        t["order_items"]
        .group_by("order_id")
        .agg(
            pl.len().cast(pl.Int64).alias("n_items"),
            pl.col("price").sum().alias("item_value"),
            pl.col("freight_value").sum().alias("freight_value"),
        )
    )
    review = (
        t["order_reviews"]
        .with_columns(pl.col("review_answer_timestamp").str.to_datetime(FMT, strict=True))
        .sort(["order_id", "review_answer_timestamp", "review_id"])
        .group_by("order_id", maintain_order=True)
        .last()
        .select("order_id", "review_score", "review_answer_timestamp")
    )
    return (
        orders.join(basket, on="order_id")
        .join(review, on="order_id", how="left")
        .with_columns(
            estimated_days=_days("order_estimated_delivery_date", "order_purchase_timestamp"),
            approval_hours=_days("order_approved_at", "order_purchase_timestamp") * 24.0,
            carrier_days=_days("order_delivered_carrier_date", "order_purchase_timestamp"),
            delivery_days=_days("order_delivered_customer_date", "order_purchase_timestamp"),
            days_past_estimate=_days(
                "order_delivered_customer_date", "order_estimated_delivery_date"
            ),
            order_value=pl.col("item_value") + pl.col("freight_value"),
        )
        .sort("order_id")
    )


@dataclass(frozen=True)
class Task:
    """One prediction task: its tables, prediction instant, features and label."""

    name: str
    """The short name: the store's tables are `<name>_training` and `<name>_scoring`."""
    kind: Literal["classification", "regression"]
    at: str
    label_at: str
    features: tuple[str, ...]
    label: Callable[[], pl.Expr]
    target: str
    """The label column's name in the training table."""
    population: Callable[[], pl.Expr] = lambda: pl.lit(True)

    def frame(self, facts: pl.DataFrame) -> pl.DataFrame:
        """entity, group, at, label_at, features and label, for the task's population."""
        return (
            facts.filter(self.population())
            .select(
                pl.col("order_id").alias("entity"),
                pl.col("customer_unique_id").alias("group"),
                pl.col(self.at).alias("at"),
                pl.col(self.label_at).alias("label_at"),
                *(pl.col(f).round(6) for f in self.features),
                self.label().alias(self.target),
            )
            .filter(pl.col("label_at").is_not_null())
        )


def _late() -> pl.Expr:
    return (pl.col("order_delivered_customer_date") > pl.col("order_estimated_delivery_date")).cast(
        pl.Int64
    )


def _reviewed() -> pl.Expr:
    return pl.col("review_score").is_not_null()


TASKS: tuple[Task, ...] = (
    Task(
        "late_delivery",
        "classification",
        "order_purchase_timestamp",
        "order_delivered_customer_date",
        ("estimated_days", "n_items", "freight_value"),
        _late,
        "late",
    ),
    Task(
        "late_at_handoff",
        "classification",
        "order_delivered_carrier_date",
        "order_delivered_customer_date",
        ("estimated_days", "carrier_days"),
        _late,
        "late",
    ),
    Task(
        "slow_delivery",
        "classification",
        "order_delivered_carrier_date",
        "order_delivered_customer_date",
        ("carrier_days", "approval_hours"),
        lambda: (pl.col("delivery_days") > 14.0).cast(pl.Int64),
        "slow",
    ),
    Task(
        "low_review",
        "classification",
        "order_delivered_customer_date",
        "review_answer_timestamp",
        ("delivery_days", "days_past_estimate"),
        lambda: (pl.col("review_score") <= 2).cast(pl.Int64),
        "low_score",
        _reviewed,
    ),
    Task(
        "top_review",
        "classification",
        "order_delivered_customer_date",
        "review_answer_timestamp",
        ("delivery_days", "days_past_estimate"),
        lambda: (pl.col("review_score") == 5).cast(pl.Int64),
        "top_score",
        _reviewed,
    ),
    Task(
        "delivery_days",
        "regression",
        "order_delivered_carrier_date",
        "order_delivered_customer_date",
        ("carrier_days", "estimated_days"),
        lambda: pl.col("delivery_days").round(6),
        "delivery_days",
    ),
    Task(
        "order_value",
        "regression",
        "order_purchase_timestamp",
        "order_purchase_timestamp",
        ("n_items", "freight_value"),
        lambda: pl.col("order_value").round(2),
        "order_value",
    ),
    Task(
        "days_past_estimate",
        "regression",
        "order_delivered_carrier_date",
        "order_delivered_customer_date",
        ("carrier_days", "estimated_days"),
        lambda: pl.col("days_past_estimate").round(6),
        "days_past_estimate",
    ),
)
"""Every task, in the order the world builds their tables."""
