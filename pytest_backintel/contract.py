"""The answer contract: what an analyst returns and what the harness scores.

The harness owns this contract; analysts import it. Its JSON form is what
`backintel score` reads and what run records store.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

__all__ = [
    "AnalystAnswer",
    "AnswerOrRefusal",
    "Evidence",
    "MetricValue",
    "Refusal",
    "parse_answer",
]

Scalar = bool | int | float | str | None
"""A metric value: a JSON number, a string for text metrics, or null. A JSON boolean stays a
boolean (never the number 1 or 0), so scoring can reject it for numeric kinds by name."""

TableValue = list[dict[str, Scalar]]
"""Rows for table metrics, each a mapping of column name to value."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MetricValue(_Strict):
    """One reported metric."""

    name: str = Field(min_length=1)
    """The requested metric's name, exactly as the question gives it."""
    value: bool | int | float | str | TableValue | None
    """A JSON number (never a string with units or separators), a string for text metrics,
    or rows for table metrics. Null means the analyst reports no value."""
    unit: str = ""
    """The unit, declared separately from the value (e.g. `BRL`, `days`, `ratio`, `orders`)."""


class Evidence(_Strict):
    """An executable program that produced one or more reported metrics.

    SQL evidence must return a result whose columns are named exactly as the metrics it
    supports (one row for scalar metrics, the rows themselves for a table metric). Python
    evidence prints one JSON object mapping metric names to values.
    """

    id: str = Field(min_length=1)
    kind: Literal["sql", "python"]
    code: str = Field(min_length=1)
    metrics: list[str] = Field(default_factory=list)
    """Names of the reported metrics this program reproduces."""


class AnalystAnswer(_Strict):
    """An answer: every requested metric exactly once, each backed by evidence."""

    status: Literal["answered"] = "answered"
    metrics: list[MetricValue]
    evidence: list[Evidence]
    method: str = ""
    caveats: list[str] = Field(default_factory=list)


class Refusal(_Strict):
    """A refusal: the question cannot be answered from the data available."""

    status: Literal["refused"] = "refused"
    missing: list[str] = Field(min_length=1)
    """The requirements that are absent (e.g. "expense ledger for 2018-Q1")."""
    explanation: str
    evidence: list[Evidence] = Field(default_factory=list)
    """Optional programs showing what was checked."""


AnswerOrRefusal = Annotated[AnalystAnswer | Refusal, Field(discriminator="status")]

_ADAPTER: TypeAdapter[AnalystAnswer | Refusal] = TypeAdapter(AnswerOrRefusal)


def parse_answer(data: str | bytes | dict[str, Any]) -> AnalystAnswer | Refusal:
    """Parse the JSON form (text or already-decoded) of an answer or refusal.

    Raises `pydantic.ValidationError` naming the offending field.
    """
    if isinstance(data, dict):
        return _ADAPTER.validate_python(data)
    return _ADAPTER.validate_json(data)
