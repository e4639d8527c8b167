"""The Olist-shaped world: its config, generator, SQLite keys and oracles."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from scenarios.olist.config import OlistConfig
from scenarios.references import ReferencedWorld
from scenarios.world_base import Oracle

if TYPE_CHECKING:  # the generator (numpy, polars) is imported to build the data, not to look it up
    import polars as pl

__all__ = ["GENERATOR_MODULES", "OlistWorld"]

HERE = Path(__file__).resolve().parent
GENERATOR_MODULES = (
    "config.py",
    "generator.py",
    "people.py",
    "reference_data.py",
    "schema.py",
    "timeline.py",
)
"""The modules whose source determines the generated data."""


class OlistWorld(ReferencedWorld):
    """Olist's eight tables, generated from a seed and an order count."""

    name = "olist"
    primary_keys: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "orders": ("order_id",),
        "customers": ("customer_id",),
        "order_items": ("order_id", "order_item_id"),
        "order_payments": ("order_id", "payment_sequential"),
        "order_reviews": ("review_id", "order_id"),
        "products": ("product_id",),
        "sellers": ("seller_id",),
        "product_category_name_translation": ("product_category_name",),
    }
    foreign_keys: ClassVar[Mapping[str, tuple[tuple[str, str, str], ...]]] = {
        "orders": (("customer_id", "customers", "customer_id"),),
        "order_items": (
            ("order_id", "orders", "order_id"),
            ("product_id", "products", "product_id"),
            ("seller_id", "sellers", "seller_id"),
        ),
        "order_payments": (("order_id", "orders", "order_id"),),
        "order_reviews": (("order_id", "orders", "order_id"),),
    }

    def __init__(self, config: OlistConfig | None = None) -> None:
        self.olist_config = config or OlistConfig()

    @classmethod
    def from_env(cls) -> OlistWorld:
        """The default config, order count overridable by BACKINTEL_OLIST_ORDERS."""
        return cls(OlistConfig.from_env())

    def code_fingerprint(self) -> str:
        digest = hashlib.sha256()
        for module in GENERATOR_MODULES:
            digest.update((HERE / module).read_bytes())
        return digest.hexdigest()[:16]

    @property
    def config(self) -> dict[str, int]:
        return self.olist_config.as_dict()

    def generate(self, snapshot: str) -> dict[str, pl.DataFrame]:
        self._check_snapshot(snapshot)
        from scenarios.olist.generator import generate

        return generate(self.olist_config)

    @property
    def oracles(self) -> Mapping[str, Oracle]:
        from scenarios.olist.oracles import ORACLES

        return ORACLES
