"""What determines the generated Olist world: seed, order count and generator version."""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = [
    "DEFAULT_ORDERS",
    "DEFAULT_SEED",
    "GENERATOR_VERSION",
    "MIN_ORDERS",
    "ORDERS_ENV",
    "OlistConfig",
]

GENERATOR_VERSION = 1
"""Bump when the generator's output changes for the same config."""
DEFAULT_SEED = 20160904
DEFAULT_ORDERS = 4000
MIN_ORDERS = 60
"""Below this the planted mess (several of each kind) does not fit."""
ORDERS_ENV = "BACKINTEL_OLIST_ORDERS"


@dataclass(frozen=True)
class OlistConfig:
    """What determines the generated data: the seed, the number of orders, the version."""

    seed: int = DEFAULT_SEED
    orders: int = DEFAULT_ORDERS

    def __post_init__(self) -> None:
        if self.orders < MIN_ORDERS:
            raise ValueError(
                f"olist world: orders must be at least {MIN_ORDERS}, got {self.orders}"
            )
        if self.seed < 0:
            raise ValueError(f"olist world: seed must be a non-negative integer, got {self.seed}")

    @classmethod
    def from_env(cls) -> OlistConfig:
        """The default config, with the order count taken from BACKINTEL_OLIST_ORDERS if set."""
        raw = os.environ.get(ORDERS_ENV, "").strip()
        if not raw:
            return cls()
        try:
            orders = int(raw)
        except ValueError:
            raise ValueError(f"{ORDERS_ENV}={raw!r} is not a whole number of orders") from None
        return cls(orders=orders)

    def as_dict(self) -> dict[str, int]:
        return {"generator": GENERATOR_VERSION, "orders": self.orders, "seed": self.seed}
