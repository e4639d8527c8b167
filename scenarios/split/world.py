"""The Olist world split over two stores: `olist_orders` and `olist_catalog`.

`olist_orders` holds the transactional tables (orders, order_items, order_payments,
order_reviews, customers), `olist_catalog` the reference tables (products, sellers,
product_category_name_translation). Each part is a world of its own (Parquet and SQLite, built
once under a lock); `olist-split` is the world level-4 scenarios bind to: its Parquet folder
holds all eight tables (what oracles read and the data hash covers) and its `DatasetFiles.extra`
declares the parts for the `multi` store: `parquet:<part>` and `sqlite:<part>`.

Check queries of level-4 scenarios name tables `<part>.<table>` (`olist_orders.orders`); on
SQLite they run with both parts' files attached under those names
(`scenarios.references.attach_parts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

import polars as pl

from scenarios.olist.world import OlistWorld
from scenarios.references import ReferencedWorld
from scenarios.world_base import Oracle, get_world
from scenarios.world_base import data_dir as default_data_dir
from stores.base import DatasetFiles

__all__ = [
    "PARTS",
    "SPLIT_STORE",
    "OlistCatalogWorld",
    "OlistOrdersWorld",
    "OlistPartWorld",
    "OlistSplitWorld",
    "build_split",
]

PARTS: dict[str, tuple[str, ...]] = {
    "olist_orders": ("orders", "order_items", "order_payments", "order_reviews", "customers"),
    "olist_catalog": ("products", "sellers", "product_category_name_translation"),
}
SPLIT_STORE = "multi:postgres:olist_orders+sqlite:olist_catalog"
"""The store level-4 scenarios are run on by default."""


class OlistPartWorld(ReferencedWorld):
    """One part of the Olist world: a subset of its tables, keys kept within the part."""

    def __init__(self, base: OlistWorld | None = None) -> None:
        self.base = base or OlistWorld.from_env()

    def __init_subclass__(cls, **kwargs: object) -> None:
        """Each part declares `name`; its keys are Olist's, restricted to its own tables."""
        super().__init_subclass__(**kwargs)
        tables = set(PARTS[cls.name])
        cls.primary_keys = {t: k for t, k in OlistWorld.primary_keys.items() if t in tables}
        cls.foreign_keys = {
            t: tuple(fk for fk in fks if fk[1] in tables)
            for t, fks in OlistWorld.foreign_keys.items()
            if t in tables
        }

    @property
    def config(self) -> dict[str, int]:
        return self.base.config

    def code_fingerprint(self) -> str:
        return f"{self.base.code_fingerprint()}:{','.join(PARTS[self.name])}"

    def generate(self, snapshot: str) -> dict[str, pl.DataFrame]:
        self._check_snapshot(snapshot)
        tables = self.base.generate(snapshot)
        return {t: tables[t] for t in PARTS[self.name]}

    @property
    def oracles(self) -> Mapping[str, Oracle]:
        return {}


class OlistOrdersWorld(OlistPartWorld):
    """orders, order_items, order_payments, order_reviews, customers."""

    name = "olist_orders"


class OlistCatalogWorld(OlistPartWorld):
    """products, sellers, product_category_name_translation."""

    name = "olist_catalog"


class OlistSplitWorld(ReferencedWorld):
    """All Olist tables, with each part's files declared for the `multi` store."""

    name = "olist-split"
    primary_keys: ClassVar[Mapping[str, tuple[str, ...]]] = OlistWorld.primary_keys
    foreign_keys: ClassVar[Mapping[str, tuple[tuple[str, str, str], ...]]] = OlistWorld.foreign_keys

    def __init__(self, base: OlistWorld | None = None) -> None:
        self.base = base or OlistWorld.from_env()
        self.parts: dict[str, OlistPartWorld] = {
            w.name: w(self.base) for w in (OlistOrdersWorld, OlistCatalogWorld)
        }

    @classmethod
    def from_env(cls) -> OlistSplitWorld:
        return cls()

    @property
    def config(self) -> dict[str, int]:
        return self.base.config

    def code_fingerprint(self) -> str:
        return f"{self.base.code_fingerprint()}:split"

    def generate(self, snapshot: str) -> dict[str, pl.DataFrame]:
        self._check_snapshot(snapshot)
        return self.base.generate(snapshot)

    @property
    def oracles(self) -> Mapping[str, Oracle]:
        from scenarios.split.oracles import ORACLES

        return ORACLES

    def ensure_built(self, data_dir: Path, snapshot: str = "base") -> DatasetFiles:
        """The whole world's files, with both parts built too and declared in `extra`."""
        whole = super().ensure_built(data_dir, snapshot)
        extra = dict(whole.extra)
        for part, world in self.parts.items():
            files = world.ensure_built(data_dir, snapshot)
            extra[f"parquet:{part}"] = files.parquet_dir
            if files.sqlite_path is not None:
                extra[f"sqlite:{part}"] = files.sqlite_path
        return DatasetFiles(whole.name, whole.parquet_dir, whole.sqlite_path, extra)


def build_split(data_dir: Path | None = None) -> DatasetFiles:
    """`backintel split build`: build both parts and the split world; its `DatasetFiles`."""
    return get_world("olist-split").ensure_built(data_dir or default_data_dir())
