"""Token prices per model from the committed, dated `pytest_backintel/records/prices.json`.

A model that is not in the table, or whose price is `null`, has an unknown cost: `cost_usd`
returns None and reports print "unknown" — never 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_backintel.analyst_api import RunLimits

__all__ = [
    "PRICES_PATH",
    "Price",
    "PriceTable",
    "PriceTableError",
    "load_prices",
    "price_warnings",
]

PRICES_PATH = Path(__file__).with_name("prices.json")


class PriceTableError(Exception):
    """prices.json is malformed; the message names the entry and what is allowed."""


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float


@dataclass(frozen=True)
class PriceTable:
    as_of: str
    models: dict[str, Price | None]

    def price_for(self, model: str | None) -> Price | None:
        """Exact `provider:name` match first, else a unique match on the bare model name."""
        if not model:
            return None
        if model in self.models:
            return self.models[model]
        bare = _bare(model)
        matches = [key for key in self.models if _bare(key) == bare]
        return self.models[matches[0]] if len(matches) == 1 else None

    def cost_usd(self, model: str | None, input_tokens: int, output_tokens: int) -> float | None:
        """The cost of these tokens, or None when the model's price is unknown."""
        price = self.price_for(model)
        if price is None:
            return None
        return (input_tokens * price.input + output_tokens * price.output) / 1_000_000


def _bare(model: str) -> str:
    return model.rsplit(":", 1)[-1].rsplit("/", 1)[-1]


def _price(name: str, entry: Any) -> Price | None:
    if entry is None:
        return None
    if not isinstance(entry, dict) or set(entry) != {"input", "output"}:
        raise PriceTableError(
            f"prices.json: model {name!r}: expected {{'input': USD, 'output': USD}} or null"
        )
    values = []
    for side in ("input", "output"):
        value = entry[side]
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise PriceTableError(
                f"prices.json: model {name!r}: {side} price {value!r} must be a positive number "
                "of USD per million tokens (use null for an unknown price, never 0)"
            )
        values.append(float(value))
    return Price(values[0], values[1])


def parse_prices(data: Any) -> PriceTable:
    """Validate the JSON form of a price table."""
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise PriceTableError("prices.json: expected an object with `as_of` and `models`")
    as_of = data.get("as_of")
    if not isinstance(as_of, str) or not as_of:
        raise PriceTableError("prices.json: `as_of` must be the date the prices were read")
    models = {str(name): _price(str(name), entry) for name, entry in data["models"].items()}
    return PriceTable(as_of, models)


@cache
def load_prices(path: Path = PRICES_PATH) -> PriceTable:
    """The price table at `path` (the committed one by default)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PriceTableError(f"{path}: not readable JSON ({exc})") from exc
    return parse_prices(data)


def price_warnings(
    model: str | None, kind_spec: str, limits: RunLimits, max_cost: float | None
) -> list[str]:
    """Header lines when a cost budget is set but the model has no price to count it with."""
    wants_cost = max_cost is not None or limits.max_cost_usd is not None
    if not wants_cost or load_prices().price_for(model) is not None:
        return []
    return [
        f"backintel: WARNING: no price for model {model!r} in {PRICES_PATH.name} "
        f"(as of {load_prices().as_of}) for analyst {kind_spec!r}: cost budgets count only "
        "priced trials; --max-cost falls back to Pydantic AI's own price estimate, if any"
    ]
