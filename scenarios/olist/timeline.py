"""Order statuses and timestamps: purchase, approval, carrier, delivery and the estimate.

Purchases span 2016-09-04 to 2018-10-17 with the real extract's monthly shape. Statuses and
timestamps stay consistent (a `shipped` order has a carrier date but no delivery), except for
the planted mess: a few `delivered` orders without a delivery timestamp and one `canceled`
order that carries one. Deliveries after the extract date are not observed.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

__all__ = ["FIRST_PURCHASE", "LAST_PURCHASE", "STATUSES", "OrderTimes", "make_timeline"]

FIRST_PURCHASE = datetime(2016, 9, 4, 21, 15, 19)
LAST_PURCHASE = datetime(2018, 10, 17, 17, 30, 18)
WIND_DOWN = datetime(2018, 8, 29)
"""Orders purchased from here on are not delivered within the extract."""
STATUSES = (
    "delivered",
    "shipped",
    "canceled",
    "unavailable",
    "invoiced",
    "processing",
    "created",
    "approved",
)
STATUS_PROBS = (0.935, 0.015, 0.015, 0.01, 0.008, 0.008, 0.004, 0.005)
WIND_DOWN_STATUSES = ("canceled", "shipped", "invoiced", "processing")
WIND_DOWN_PROBS = (0.6, 0.2, 0.1, 0.1)
DAY = 86400.0


@dataclass
class OrderTimes:
    purchase: datetime
    status: str
    approved: datetime | None = None
    carrier: datetime | None = None
    delivered: datetime | None = None
    estimated: datetime = FIRST_PURCHASE

    @property
    def late(self) -> bool:
        return self.delivered is not None and self.delivered > self.estimated


def _days(days: float) -> timedelta:
    """A whole number of seconds, so timestamps have no fractional part."""
    return timedelta(seconds=int(days * DAY))


def _purchases(
    rng: np.random.Generator, n: int, month_weights: dict[tuple[int, int], float]
) -> list[datetime]:
    months = list(month_weights)
    w = np.asarray([month_weights[m] for m in months], dtype=float)
    picks = rng.choice(len(months), size=n, p=w / w.sum())
    out = []
    for idx in picks:
        year, month = months[int(idx)]
        start = max(datetime(year, month, 1), FIRST_PURCHASE)
        end = min(
            datetime(year, month, calendar.monthrange(year, month)[1], 23, 59, 59), LAST_PURCHASE
        )
        span = int((end - start).total_seconds())
        out.append(start + timedelta(seconds=int(rng.integers(0, span + 1))))
    out[0] = FIRST_PURCHASE
    out[-1] = LAST_PURCHASE
    return out


def _statuses(rng: np.random.Generator, purchases: list[datetime]) -> list[str]:
    statuses = []
    for p in purchases:
        if p >= WIND_DOWN:
            statuses.append(str(rng.choice(WIND_DOWN_STATUSES, p=WIND_DOWN_PROBS)))
        else:
            statuses.append(str(rng.choice(STATUSES, p=STATUS_PROBS)))
    statuses[0] = statuses[-1] = "canceled"
    forced = [("canceled", 2018, 3)] + [(s, None, 2) for s in STATUSES[1:]]
    for status, year, need in forced:
        have = sum(
            1
            for s, p in zip(statuses, purchases, strict=True)
            if s == status and (year is None or p.year == year) and p < WIND_DOWN
        )
        pool = [
            i
            for i, (s, p) in enumerate(zip(statuses, purchases, strict=True))
            if s == "delivered" and (year is None or p.year == year)
        ]
        if need > have:
            for i in rng.choice(len(pool), size=need - have, replace=False):
                statuses[pool[int(i)]] = status
    return statuses


def _times(rng: np.random.Generator, purchase: datetime, status: str) -> OrderTimes:
    t = OrderTimes(purchase=purchase, status=status)
    midnight = datetime(purchase.year, purchase.month, purchase.day)
    t.estimated = midnight + timedelta(days=int(rng.integers(14, 36)))
    if status == "created":
        return t
    delay = float(rng.exponential(0.25)) + (float(rng.uniform(1, 3)) if rng.random() < 0.15 else 0)
    t.approved = purchase + _days(delay)
    if status == "canceled" and rng.random() < 0.3:
        t.approved = None
    ships = status in ("delivered", "shipped") or (status == "canceled" and rng.random() < 0.2)
    if not ships:
        return t
    t.carrier = (t.approved or purchase) + _days(float(rng.gamma(2.0, 1.2)))
    if status == "delivered":
        slow = 1.6 if (purchase.year, purchase.month) in ((2018, 2), (2018, 3)) else 1.0
        t.delivered = t.carrier + _days(float(rng.gamma(2.2, 3.6)) * slow)
    return t


def make_timeline(
    rng: np.random.Generator, n: int, month_weights: dict[tuple[int, int], float]
) -> list[OrderTimes]:
    """Statuses and timestamps for `n` orders, the first and last at the extract's bounds."""
    purchases = _purchases(rng, n, month_weights)
    statuses = _statuses(rng, purchases)
    times = [_times(rng, p, s) for p, s in zip(purchases, statuses, strict=True)]
    for t in times:  # not yet observed at extract time
        if t.delivered is not None and t.delivered > LAST_PURCHASE:
            t.status, t.delivered = "shipped", None
        if t.carrier is not None and t.carrier > LAST_PURCHASE:
            t.status, t.carrier = "invoiced", None
    delivered = [i for i, t in enumerate(times) if t.status == "delivered"]
    for i in rng.choice(len(delivered), size=max(2, n // 1500), replace=False):
        times[delivered[int(i)]].delivered = None  # delivered, timestamp never recorded
    early = [
        i
        for i, t in enumerate(times)
        if t.status == "canceled" and t.purchase < datetime(2018, 6, 1)
    ]
    # a canceled order that nevertheless carries a delivery timestamp (the first order is an
    # early canceled one, so there is always a candidate)
    t = times[early[int(rng.integers(len(early)))]]
    t.approved = t.approved or t.purchase + _days(float(rng.exponential(0.25)))
    t.carrier = t.approved + _days(float(rng.gamma(2.0, 1.2)))
    t.delivered = t.carrier + _days(float(rng.gamma(2.2, 3.6)))
    return times
