"""Ambient replay: the Olist world as it was known at the cutoffs of three standing reviews.

A monthly delivery review, a quarterly repeat-purchasing review and a weekly seller review each
run on a schedule. Every scheduled run sees one immutable snapshot: the planted Olist "truth"
cut off at the run's cutoff. Cutting off hides every observation made at or after the cutoff:

- orders purchased at or after it are removed, with their items, payments and customers;
- approval, carrier and delivery timestamps at or after it become NULL;
- the status rolls back to the one implied by what was observed (a delivered order whose
  delivery is not yet observed is `shipped` if its carrier date is, else `approved` if its
  approval is, else `created`). A final status becomes visible at its event time: delivery
  timestamp for `delivered` (the estimated delivery date when none was recorded), carrier date
  for `shipped`, approval for `approved`/`invoiced`/`processing`, the latest recorded
  timestamp for `canceled`/`unavailable`, purchase for `created`;
- review rows answered at or after it are removed.

Estimated delivery dates, shipping limits, payments and the catalog (products, sellers,
category translations) are known from the purchase on and are kept. Planted changes are
declared in `PLANTS` and applied to the truth (the base Olist world) before cutting.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import ClassVar, Literal

import polars as pl

from scenarios.olist.generator import OlistConfig, generate
from scenarios.olist.world import GENERATOR_MODULES, OlistWorld
from scenarios.references import ReferencedWorld
from scenarios.world_base import Oracle
from scenarios.world_base import data_dir as default_data_dir
from stores.base import DatasetFiles

__all__ = [
    "FMT",
    "PLANTS",
    "REPLAY_VERSION",
    "SNAPSHOTS",
    "DeliveryDelay",
    "OlistReplayWorld",
    "Plant",
    "RepeatJump",
    "Review",
    "SellerCollapse",
    "Snapshot",
    "Tables",
    "as_of",
    "build_replay",
    "plant",
    "snapshot_named",
]

FMT = "%Y-%m-%d %H:%M:%S"
REPLAY_VERSION = 1
"""Bump when snapshot construction changes for the same base config."""
HERE = Path(__file__).resolve().parent

Review = Literal["delivery", "repeat", "weekly"]


@dataclass(frozen=True)
class Snapshot:
    """One scheduled run of a standing review: what it is called and when it was cut off."""

    name: str
    review: Review
    cutoff: datetime
    """Everything observed strictly before this instant is in the snapshot, nothing else."""


SNAPSHOTS: tuple[Snapshot, ...] = (
    # monthly delivery review: run on the 1st, with a one-week follow-up in July 2018
    Snapshot("delivery-2018-06-01", "delivery", datetime(2018, 6, 1)),
    Snapshot("delivery-2018-07-01", "delivery", datetime(2018, 7, 1)),
    Snapshot("delivery-2018-07-08", "delivery", datetime(2018, 7, 8)),
    Snapshot("delivery-2018-08-01", "delivery", datetime(2018, 8, 1)),
    # quarterly repeat-purchasing review: run on the first day of the next quarter
    Snapshot("repeat-2017q3", "repeat", datetime(2017, 10, 1)),
    Snapshot("repeat-2017q4", "repeat", datetime(2018, 1, 1)),
    Snapshot("repeat-2018q1", "repeat", datetime(2018, 4, 1)),
    # weekly seller review: run on the Monday after the ISO week under review
    Snapshot("weekly-2018-w20", "weekly", datetime(2018, 5, 21)),
    Snapshot("weekly-2018-w21", "weekly", datetime(2018, 5, 28)),
    Snapshot("weekly-2018-w22", "weekly", datetime(2018, 6, 4)),
)


def snapshot_named(name: str) -> Snapshot:
    """The declared snapshot `name`; the error lists the declared ones."""
    for snap in SNAPSHOTS:
        if snap.name == name:
            return snap
    raise ValueError(
        f"no replay snapshot {name!r}; declared: {', '.join(s.name for s in SNAPSHOTS)}"
    )


Tables = dict[str, pl.DataFrame]


def _ts(col: str) -> pl.Expr:
    return pl.col(col).str.to_datetime(FMT, strict=True)


def _shifted(col: str, targets: list[str], seconds: int) -> pl.Expr:
    moved = (_ts(col) + pl.duration(seconds=seconds)).dt.strftime(FMT)
    return pl.when(pl.col("order_id").is_in(targets)).then(moved).otherwise(pl.col(col)).alias(col)


@dataclass(frozen=True)
class DeliveryDelay:
    """Delivered orders purchased in [purchased_from, purchased_to) arrive `extra_days` later;
    their review rows move with them (orders sharing a review id with another are left out)."""

    snapshot: str
    """The first snapshot of the review where the delay is expected to raise the alert."""
    purchased_from: datetime
    purchased_to: datetime
    extra_days: float
    review: ClassVar[Review] = "delivery"

    def targets(self, t: Tables) -> list[str]:
        shared = (
            t["order_reviews"]
            .group_by("review_id")
            .agg(pl.col("order_id").n_unique().alias("n"), pl.col("order_id"))
            .filter(pl.col("n") > 1)
            .explode("order_id")["order_id"]
        )
        purchased = pl.col("order_purchase_timestamp")
        return sorted(
            t["orders"]
            .filter(
                (pl.col("order_status") == "delivered")
                & pl.col("order_delivered_customer_date").is_not_null()
                & (purchased >= self.purchased_from.strftime(FMT))
                & (purchased < self.purchased_to.strftime(FMT))
                & ~pl.col("order_id").is_in(shared.implode())
            )["order_id"]
            .to_list()
        )

    def apply(self, t: Tables) -> Tables:
        targets, seconds = self.targets(t), round(self.extra_days * 86400)
        out = dict(t)
        out["orders"] = t["orders"].with_columns(
            _shifted("order_delivered_customer_date", targets, seconds)
        )
        out["order_reviews"] = t["order_reviews"].with_columns(
            _shifted("review_creation_date", targets, seconds),
            _shifted("review_answer_timestamp", targets, seconds),
        )
        return out


@dataclass(frozen=True)
class SellerCollapse:
    """The top seller by delivered item revenue over the four weeks before `week_start` sells
    nothing delivered in the week from `week_start`: those items pass to the seller with the
    lowest id among the others."""

    snapshot: str
    week_start: datetime
    review: ClassVar[Review] = "weekly"

    def _delivered_items(self, t: Tables, start: datetime, end: datetime) -> pl.DataFrame:
        d = pl.col("order_delivered_customer_date")
        orders = t["orders"].filter(
            (pl.col("order_status") == "delivered")
            & (d >= start.strftime(FMT))
            & (d < end.strftime(FMT))
        )
        return t["order_items"].filter(pl.col("order_id").is_in(orders["order_id"].implode()))

    def seller(self, t: Tables) -> str:
        """The seller that collapses (ties broken by the lower seller id)."""
        items = self._delivered_items(t, self.week_start - timedelta(weeks=4), self.week_start)
        revenue = items.group_by("seller_id").agg(pl.col("price").sum().alias("revenue"))
        return str(revenue.sort(["revenue", "seller_id"], descending=[True, False])[0, "seller_id"])

    def apply(self, t: Tables) -> Tables:
        seller = self.seller(t)
        others = t["sellers"].filter(pl.col("seller_id") != seller)["seller_id"]
        week = self._delivered_items(t, self.week_start, self.week_start + timedelta(weeks=1))
        moved = week.filter(pl.col("seller_id") == seller)["order_id"].implode()
        out = dict(t)
        out["order_items"] = t["order_items"].with_columns(
            pl.when(pl.col("order_id").is_in(moved) & (pl.col("seller_id") == seller))
            .then(pl.lit(others.min()))
            .otherwise(pl.col("seller_id"))
            .alias("seller_id")
        )
        return out


@dataclass(frozen=True)
class RepeatJump:
    """`pairs` pairs of people whose only order was purchased in [start, end) become one person
    each: the second customer row takes the first's `customer_unique_id` and address."""

    snapshot: str
    start: datetime
    end: datetime
    pairs: int
    review: ClassVar[Review] = "repeat"

    def people(self, t: Tables) -> list[str]:
        """The merged people's ids, in pairs (first, second), sorted."""
        purchased = pl.col("order_purchase_timestamp")
        inside = (purchased >= self.start.strftime(FMT)) & (purchased < self.end.strftime(FMT))
        per_person = (
            t["orders"]
            .join(t["customers"], on="customer_id")
            .group_by("customer_unique_id")
            .agg(pl.len().alias("orders"), inside.all().alias("inside"))
            .filter((pl.col("orders") == 1) & pl.col("inside"))
        )
        chosen = sorted(per_person["customer_unique_id"].to_list())[: 2 * self.pairs]
        if len(chosen) < 2 * self.pairs:
            raise ValueError(f"{self}: only {len(chosen)} one-order people in the quarter")
        return chosen

    def apply(self, t: Tables) -> Tables:
        chosen = self.people(t)
        address = ["customer_zip_code_prefix", "customer_city", "customer_state"]
        firsts = (
            t["customers"]
            .filter(pl.col("customer_unique_id").is_in(chosen[0::2]))
            .select(pl.col("customer_unique_id").alias("first_id"), *address)
        )
        pairs = pl.DataFrame({"customer_unique_id": chosen[1::2], "first_id": chosen[0::2]})
        moved = pairs.join(firsts, on="first_id").rename({c: f"first_{c}" for c in address})
        customers = t["customers"].join(
            moved, on="customer_unique_id", how="left", maintain_order="left"
        )
        out = dict(t)
        out["customers"] = customers.with_columns(
            pl.coalesce(f"first_{c}" if c != "customer_unique_id" else "first_id", c).alias(c)
            for c in ["customer_unique_id", *address]
        ).select(t["customers"].columns)
        return out


Plant = DeliveryDelay | SellerCollapse | RepeatJump

PLANTS: tuple[Plant, ...] = (
    DeliveryDelay(
        snapshot="delivery-2018-07-08",
        purchased_from=datetime(2018, 6, 10),
        purchased_to=datetime(2018, 7, 1),
        extra_days=8.0,
    ),
    RepeatJump(
        snapshot="repeat-2017q4", start=datetime(2017, 10, 1), end=datetime(2018, 1, 1), pairs=20
    ),
    SellerCollapse(snapshot="weekly-2018-w22", week_start=datetime(2018, 5, 28)),
)
"""Every planted change: which review, the first snapshot expected to alert, what changed."""


def _seen(col: str, cutoff: str) -> pl.Expr:
    return pl.when(pl.col(col) < cutoff).then(pl.col(col)).otherwise(None).alias(col)


def _status_time() -> pl.Expr:
    """When the order's final status became known (see the module docstring)."""
    status = pl.col("order_status")
    return (
        pl.when(status == "delivered")
        .then(pl.coalesce("order_delivered_customer_date", "order_estimated_delivery_date"))
        .when(status == "shipped")
        .then(pl.col("order_delivered_carrier_date"))
        .when(status.is_in(["canceled", "unavailable"]))
        .then(
            pl.max_horizontal(
                "order_purchase_timestamp",
                "order_approved_at",
                "order_delivered_carrier_date",
                "order_delivered_customer_date",
            )
        )
        .when(status.is_in(["approved", "invoiced", "processing"]))
        .then(pl.coalesce("order_approved_at", "order_purchase_timestamp"))
        .otherwise(pl.col("order_purchase_timestamp"))
    )


def _status_at(cutoff: str) -> pl.Expr:
    return (
        pl.when(_status_time() < cutoff)
        .then(pl.col("order_status"))
        .when(pl.col("order_delivered_carrier_date") < cutoff)
        .then(pl.lit("shipped"))
        .when(pl.col("order_approved_at") < cutoff)
        .then(pl.lit("approved"))
        .otherwise(pl.lit("created"))
        .alias("order_status")
    )


def as_of(truth: Tables, cutoff: datetime) -> Tables:
    """The tables as they were known at `cutoff` (observations strictly before it)."""
    c = cutoff.strftime(FMT)
    orders = (
        truth["orders"]
        .filter(pl.col("order_purchase_timestamp") < c)
        .with_columns(_status_at(c))
        .with_columns(
            _seen("order_approved_at", c),
            _seen("order_delivered_carrier_date", c),
            _seen("order_delivered_customer_date", c),
        )
    )
    kept = orders["order_id"].implode()
    out = dict(truth)
    out["orders"] = orders
    for table in ("order_items", "order_payments"):
        out[table] = truth[table].filter(pl.col("order_id").is_in(kept))
    out["order_reviews"] = truth["order_reviews"].filter(
        pl.col("order_id").is_in(kept) & (pl.col("review_answer_timestamp") < c)
    )
    out["customers"] = truth["customers"].filter(
        pl.col("customer_id").is_in(orders["customer_id"].implode())
    )
    return out


def plant(base: Tables, plants: tuple[Plant, ...] = PLANTS) -> Tables:
    """`base` with every plant applied, in declaration order."""
    tables = dict(base)
    for p in plants:
        tables = p.apply(tables)
    return tables


class OlistReplayWorld(ReferencedWorld):
    """The planted Olist world cut off at each declared snapshot.

    The plants are tuned to the default Olist config (not BACKINTEL_OLIST_ORDERS); another
    config is for tests of the mechanics only, its alerts are not guaranteed."""

    name = "olist-replay"
    snapshots: ClassVar[tuple[str, ...]] = tuple(s.name for s in SNAPSHOTS)
    primary_keys = OlistWorld.primary_keys
    foreign_keys = OlistWorld.foreign_keys

    def __init__(self, config: OlistConfig | None = None) -> None:
        self.olist_config = config or OlistConfig()

    @property
    def config(self) -> dict[str, int]:
        return {**self.olist_config.as_dict(), "replay": REPLAY_VERSION}

    def code_fingerprint(self) -> str:
        digest = hashlib.sha256()
        for module in GENERATOR_MODULES:
            digest.update((HERE.parent / "olist" / module).read_bytes())
        digest.update((HERE / "world.py").read_bytes())
        return digest.hexdigest()[:16]

    @cached_property
    def truth(self) -> Tables:
        """The planted world at the extract date (never a snapshot itself)."""
        return plant(generate(self.olist_config))

    def generate(self, snapshot: str) -> dict[str, pl.DataFrame]:
        self._check_snapshot(snapshot)
        return as_of(self.truth, snapshot_named(snapshot).cutoff)

    @property
    def oracles(self) -> Mapping[str, Oracle]:
        from scenarios.replay.oracles import ORACLES

        return ORACLES


def build_replay(data_dir: Path | None = None) -> dict[str, DatasetFiles]:
    """Every replay snapshot's files (snapshot name -> files), building the missing ones under
    `data_dir` (default: $BACKINTEL_DATA_DIR or `<repo>/data`). Built snapshots are reused."""
    world = OlistReplayWorld()
    root = data_dir or default_data_dir()
    return {name: world.ensure_built(root, name) for name in world.snapshots}
