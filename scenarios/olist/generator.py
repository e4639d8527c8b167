"""A seeded, deterministic generator of an Olist-shaped e-commerce extract.

Same schema as the public Olist CSVs (eight tables, timestamps as 'YYYY-MM-DD HH:MM:SS'
strings, prices with two decimals) and the same kinds of mess: undelivered and cancelled
orders, delivered orders without a delivery timestamp, orders with several reviews or none,
review ids shared by two orders, products without a category, categories without an English
translation, and people (`customer_unique_id`) behind several per-order `customer_id`s.
Every random draw comes from one `numpy.random.Generator` seeded by the config.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime, timedelta

import numpy as np
import polars as pl

from scenarios.olist.config import (
    DEFAULT_ORDERS,
    DEFAULT_SEED,
    GENERATOR_VERSION,
    MIN_ORDERS,
    ORDERS_ENV,
    OlistConfig,
)
from scenarios.olist.people import Person, make_people
from scenarios.olist.reference_data import (
    CATEGORIES,
    MONTH_WEIGHTS,
    REVIEW_MESSAGES,
    REVIEW_TITLES,
    SELLER_STATE_WEIGHTS,
    STATES,
    UNUSED_TRANSLATIONS,
)
from scenarios.olist.schema import SCHEMAS, SHARED_REVIEW_COLUMNS
from scenarios.olist.timeline import LAST_PURCHASE, OrderTimes, make_timeline

__all__ = [
    "DEFAULT_ORDERS",
    "DEFAULT_SEED",
    "GENERATOR_VERSION",
    "MIN_ORDERS",
    "ORDERS_ENV",
    "OlistConfig",
    "generate",
]

CACHED_CONFIGS = 4
"""Configs whose tables a process keeps (`generate`): the Olist-based worlds share one."""
_CACHE: OrderedDict[OlistConfig, dict[str, pl.DataFrame]] = OrderedDict()
_CACHE_LOCK = threading.Lock()

FMT = "%Y-%m-%d %H:%M:%S"


def _ts(value: datetime | None) -> str | None:
    return None if value is None else value.strftime(FMT)


def _hex_ids(rng: np.random.Generator, n: int, taken: set[str]) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        candidate = rng.bytes(16).hex()
        if candidate not in taken:
            taken.add(candidate)
            out.append(candidate)
    return out


def _weights(values: list[float]) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    out: np.ndarray = arr / arr.sum()
    return out


class _Builder:
    """Draws the tables in a fixed order so a seed always gives the same extract."""

    def __init__(self, config: OlistConfig) -> None:
        self.cfg = config
        self.rng = np.random.default_rng(config.seed)
        self.ids: set[str] = set()

    # --- sellers and products -------------------------------------------------------------
    def sellers(self) -> pl.DataFrame:
        rng = self.rng
        n = max(8, self.cfg.orders // 13)
        states = list(SELLER_STATE_WEIGHTS)
        picks = rng.choice(len(states), size=n, p=_weights(list(SELLER_STATE_WEIGHTS.values())))
        self.seller_ids = _hex_ids(rng, n, self.ids)
        self.seller_weight = _weights(list(rng.pareto(1.3, size=n) + 1.0))
        rows = []
        for sid, idx in zip(self.seller_ids, picks, strict=True):
            state = states[int(idx)]
            _, cities, (lo, hi) = STATES[state]
            rows.append(
                {
                    "seller_id": sid,
                    "seller_zip_code_prefix": f"{int(rng.integers(lo, hi + 1)):05d}",
                    "seller_city": cities[int(rng.integers(len(cities)))],
                    "seller_state": state,
                }
            )
        return pl.DataFrame(rows, schema=SCHEMAS["sellers"], orient="row")

    def products(self) -> pl.DataFrame:
        rng = self.rng
        n = max(30, self.cfg.orders // 4)
        cats = rng.choice(len(CATEGORIES), size=n, p=_weights([c[2] for c in CATEGORIES]))
        untranslated = [i for i, c in enumerate(CATEGORIES) if c[1] is None]
        for j, cat in enumerate(untranslated):  # two products in each untranslated category
            cats[2 * j] = cat
            cats[2 * j + 1] = cat
        n_missing = max(2, round(n * 0.015))
        missing = set(
            rng.choice(np.arange(2 * len(untranslated), n), size=n_missing, replace=False)
        )
        self.product_ids = _hex_ids(rng, n, self.ids)
        self.product_price = [
            max(3.5, round(float(rng.lognormal(np.log(80.0), 0.9)), 2)) for _ in range(n)
        ]
        self.product_seller = rng.choice(len(self.seller_ids), size=n, p=self.seller_weight)
        self.product_weight = _weights(list(rng.pareto(1.1, size=n) + 1.0))
        self.product_group: list[str] = []  # "ok", "untranslated" or "missing"
        no_dims = int(rng.integers(2 * len(untranslated), n))
        rows = []
        for i, pid in enumerate(self.product_ids):
            name: str | None = CATEGORIES[int(cats[i])][0]
            if i in missing:
                name = None
            self.product_group.append(
                "missing"
                if name is None
                else "untranslated"
                if CATEGORIES[int(cats[i])][1] is None
                else "ok"
            )
            weight = int(rng.integers(50, 20000))
            dims = [int(rng.integers(8, 80)) for _ in range(3)]
            text = name is not None
            rows.append(
                {
                    "product_id": pid,
                    "product_category_name": name,
                    "product_name_lenght": int(rng.integers(20, 64)) if text else None,
                    "product_description_lenght": int(rng.integers(80, 3000)) if text else None,
                    "product_photos_qty": int(rng.integers(1, 7)) if text else None,
                    "product_weight_g": None if i == no_dims else weight,
                    "product_length_cm": None if i == no_dims else dims[0],
                    "product_height_cm": None if i == no_dims else dims[1],
                    "product_width_cm": None if i == no_dims else dims[2],
                }
            )
        return pl.DataFrame(rows, schema=SCHEMAS["products"], orient="row")

    # --- items --------------------------------------------------------------------------------
    def items(self, times: list[OrderTimes], order_ids: list[str]) -> pl.DataFrame:
        rng = self.rng
        n_products = len(self.product_ids)
        delivered = [i for i, t in enumerate(times) if t.status == "delivered"]
        forced: dict[int, int] = {}
        for group in ("untranslated", "missing"):
            members = [p for p, g in enumerate(self.product_group) if g == group]
            for p in members[:3]:
                free = [o for o in delivered if o not in forced]
                forced[int(free[int(rng.integers(len(free)))])] = p
        rows = []
        self.order_item_total: dict[int, float] = {}
        for o, t in enumerate(times):
            has_items = t.status not in ("unavailable", "created") and not (
                t.status == "canceled" and rng.random() < 0.15
            )
            if not has_items and o not in forced:
                continue
            k = int(rng.choice([1, 2, 3, 4, 5, 6], p=[0.89, 0.08, 0.02, 0.006, 0.003, 0.001]))
            product = forced.get(o, int(rng.choice(n_products, p=self.product_weight)))
            limit = (t.approved or t.purchase) + timedelta(
                days=6, seconds=int(rng.integers(0, 86400))
            )
            total = 0.0
            for item_no in range(1, k + 1):
                if item_no > 1 and rng.random() < 0.5:
                    product = int(rng.choice(n_products, p=self.product_weight))
                seller = int(self.product_seller[product])
                if rng.random() < 0.05:
                    seller = int(rng.choice(len(self.seller_ids), p=self.seller_weight))
                price = self.product_price[product]
                freight = max(0.0, round(float(rng.normal(19.0, 9.0)), 2))
                if rng.random() < 0.02:
                    freight = 0.0
                total += price + freight
                rows.append(
                    {
                        "order_id": order_ids[o],
                        "order_item_id": item_no,
                        "product_id": self.product_ids[product],
                        "seller_id": self.seller_ids[seller],
                        "shipping_limit_date": _ts(limit),
                        "price": price,
                        "freight_value": freight,
                    }
                )
            self.order_item_total[o] = round(total, 2)
        return pl.DataFrame(rows, schema=SCHEMAS["order_items"], orient="row")

    # --- payments ---------------------------------------------------------------------------
    def payments(self, times: list[OrderTimes], order_ids: list[str]) -> pl.DataFrame:
        rng = self.rng
        types = ["credit_card", "boleto", "voucher", "debit_card"]
        canceled = [o for o, t in enumerate(times) if t.status == "canceled"]
        not_defined = canceled[0] if canceled else -1
        rows = []
        for o in range(len(times)):
            total = self.order_item_total.get(o)
            if total is None:
                total = round(float(rng.lognormal(np.log(120.0), 0.7)), 2)
            parts: list[tuple[str, float, int]] = []
            if o == not_defined:
                parts.append(("not_defined", 0.0, 1))
            elif rng.random() < 0.03 and total > 20:
                voucher = round(total * float(rng.uniform(0.1, 0.6)), 2)
                parts.append(("voucher", voucher, 1))
                parts.append(("credit_card", round(total - voucher, 2), int(rng.integers(1, 6))))
            else:
                kind = types[int(rng.choice(4, p=[0.74, 0.19, 0.05, 0.02]))]
                inst = int(rng.integers(1, 11)) if kind == "credit_card" else 1
                parts.append((kind, total, inst))
            for seq, (kind, value, inst) in enumerate(parts, 1):
                rows.append(
                    {
                        "order_id": order_ids[o],
                        "payment_sequential": seq,
                        "payment_type": kind,
                        "payment_installments": inst,
                        "payment_value": value,
                    }
                )
        return pl.DataFrame(rows, schema=SCHEMAS["order_payments"], orient="row")

    # --- reviews ----------------------------------------------------------------------------
    def reviews(
        self, times: list[OrderTimes], order_ids: list[str], people: list[Person]
    ) -> pl.DataFrame:
        rng = self.rng
        counts = []
        for t in times:
            u = rng.random()
            n = 0 if u < 0.03 else 2 if u < 0.045 else 3 if u < 0.048 else 1
            if t.delivered is None and t.estimated >= LAST_PURCHASE:
                n = 0  # the review would come after the extract date
            counts.append(n)
        shared = self._shared_review_pairs(times, people)
        protected = {o for pair in shared for o in pair}
        for o in protected:
            counts[o] = max(1, counts[o])
        delivered_one = [
            o
            for o, t in enumerate(times)
            if t.status == "delivered" and counts[o] == 1 and o not in protected
        ]
        need = max(2, len(times) // 500)
        chosen = rng.choice(len(delivered_one), size=2 * need, replace=False)
        for j, idx in enumerate(chosen):
            counts[delivered_one[int(idx)]] = 0 if j < need else 2
        normal = [0.115, 0.03, 0.085, 0.19, 0.58]
        late = [0.35, 0.1, 0.15, 0.15, 0.25]
        unhappy = [0.55, 0.1, 0.1, 0.1, 0.15]
        rows: list[dict[str, object]] = []
        first_review: dict[int, dict[str, object]] = {}
        for o, t in enumerate(times):
            base = t.delivered or t.estimated
            for r in range(counts[o]):
                probs = normal if t.status == "delivered" else unhappy
                if t.late:
                    probs = late
                created = datetime(base.year, base.month, base.day) + timedelta(
                    days=1 + 3 * r + int(rng.integers(0, 3))
                )
                answered = created + timedelta(seconds=int(rng.integers(3600, 5 * 86400)))
                row: dict[str, object] = {
                    "review_id": _hex_ids(rng, 1, self.ids)[0],
                    "order_id": order_ids[o],
                    "review_score": int(rng.choice(5, p=probs)) + 1,
                    "review_comment_title": (
                        REVIEW_TITLES[int(rng.integers(len(REVIEW_TITLES)))]
                        if rng.random() < 0.12
                        else None
                    ),
                    "review_comment_message": (
                        REVIEW_MESSAGES[int(rng.integers(len(REVIEW_MESSAGES)))]
                        if rng.random() < 0.42
                        else None
                    ),
                    "review_creation_date": _ts(created),
                    "review_answer_timestamp": _ts(answered),
                }
                rows.append(row)
                first_review.setdefault(o, row)
        for keep, copy in shared:  # one review row covering two orders of the same person
            src, dst = first_review[keep], first_review[copy]
            for col in SHARED_REVIEW_COLUMNS:
                dst[col] = src[col]
        return pl.DataFrame(rows, schema=SCHEMAS["order_reviews"], orient="row")

    def _shared_review_pairs(
        self, times: list[OrderTimes], people: list[Person]
    ) -> list[tuple[int, int]]:
        """Pairs of one person's orders that will share a review id, as in the real extract."""

        def observed(o: int) -> bool:
            return times[o].delivered is not None or times[o].estimated < LAST_PURCHASE

        pairs = [
            (p.orders[0], p.orders[1])
            for p in people
            if len(p.orders) >= 2 and observed(p.orders[0]) and observed(p.orders[1])
        ]
        want = min(len(pairs), max(1, self.cfg.orders // 800))
        picks = sorted(int(i) for i in self.rng.choice(len(pairs), size=want, replace=False))
        return [pairs[i] for i in picks]


def generate(config: OlistConfig) -> dict[str, pl.DataFrame]:
    """The eight Olist tables for `config`, generated once per process (the last
    `CACHED_CONFIGS` kept); a new dict each call, of frames polars never changes in place."""
    with _CACHE_LOCK:
        if config not in _CACHE:
            _CACHE[config] = _generate(config)
        _CACHE.move_to_end(config)
        while len(_CACHE) > CACHED_CONFIGS:
            _CACHE.popitem(last=False)
        return dict(_CACHE[config])


def _generate(config: OlistConfig) -> dict[str, pl.DataFrame]:
    """The eight Olist tables for `config`; identical content for identical configs."""
    b = _Builder(config)
    people, person_of_order = make_people(b.rng, config.orders, b.ids)
    sellers = b.sellers()
    products = b.products()
    times = make_timeline(b.rng, config.orders, MONTH_WEIGHTS)
    order_ids = _hex_ids(b.rng, config.orders, b.ids)
    customer_ids = _hex_ids(b.rng, config.orders, b.ids)
    orders = pl.DataFrame(
        [
            {
                "order_id": order_ids[o],
                "customer_id": customer_ids[o],
                "order_status": t.status,
                "order_purchase_timestamp": _ts(t.purchase),
                "order_approved_at": _ts(t.approved),
                "order_delivered_carrier_date": _ts(t.carrier),
                "order_delivered_customer_date": _ts(t.delivered),
                "order_estimated_delivery_date": _ts(t.estimated),
            }
            for o, t in enumerate(times)
        ],
        schema=SCHEMAS["orders"],
        orient="row",
    )
    customers = pl.DataFrame(
        [
            {
                "customer_id": customer_ids[o],
                "customer_unique_id": people[person_of_order[o]].unique_id,
                "customer_zip_code_prefix": people[person_of_order[o]].zip_prefix,
                "customer_city": people[person_of_order[o]].city,
                "customer_state": people[person_of_order[o]].state,
            }
            for o in range(config.orders)
        ],
        schema=SCHEMAS["customers"],
        orient="row",
    )
    items = b.items(times, order_ids)
    payments = b.payments(times, order_ids)
    reviews = b.reviews(times, order_ids, people)
    translation = pl.DataFrame(
        [(pt, en) for pt, en, _ in CATEGORIES if en is not None] + list(UNUSED_TRANSLATIONS),
        schema=SCHEMAS["product_category_name_translation"],
        orient="row",
    )
    return {
        "customers": customers,
        "order_items": items,
        "order_payments": payments,
        "order_reviews": reviews,
        "orders": orders,
        "product_category_name_translation": translation,
        "products": products,
        "sellers": sellers,
    }
