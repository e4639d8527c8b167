"""BackIntel Bench: a pytest plugin that measures data-analyst agents honestly."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_backintel.contract import (
        AnalystAnswer,
        Evidence,
        MetricValue,
        Refusal,
        parse_answer,
    )

__all__ = ["AnalystAnswer", "Evidence", "MetricValue", "Refusal", "__version__", "parse_answer"]

__version__ = "0.1.0"

_CONTRACT = {"AnalystAnswer", "Evidence", "MetricValue", "Refusal", "parse_answer"}


def __getattr__(name: str) -> Any:
    """The contract's names, imported on first use (`backintel --help` needs no pydantic)."""
    if name in _CONTRACT:
        from pytest_backintel import contract

        return getattr(contract, name)
    raise AttributeError(f"module 'pytest_backintel' has no attribute {name!r}")
