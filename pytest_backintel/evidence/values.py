"""Values out of what a program produced: the column-name rule for SQL results, and values
made JSON-safe for records. Shared by re-execution and the probes' check values."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from pytest_backintel.scenario import MetricKind
from stores.base import QueryResult

__all__ = ["EVIDENCE_MAX_ROWS", "jsonable", "values_from_result"]

EVIDENCE_MAX_ROWS = 10_000
"""Re-execution reads up to this many rows (table metrics); more means unsupported."""


def jsonable(value: Any) -> Any:
    """Values as JSON-safe Python (Decimal to float, dates to ISO strings)."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return value


def values_from_result(
    result: QueryResult, metrics: list[str], kinds: Mapping[str, MetricKind]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Metric values out of a SQL result by the column-name rule; problems per metric."""
    values: dict[str, Any] = {}
    problems: dict[str, str] = {}
    if result.truncated:
        return values, {m: f"the result has more than {result.max_rows} rows" for m in metrics}
    records = [{k: jsonable(v) for k, v in r.items()} for r in result.records()]
    for name in metrics:
        if kinds.get(name) is MetricKind.TABLE:
            values[name] = records
        elif name not in result.columns:
            problems[name] = f"no column named {name!r} (columns: {result.columns})"
        elif len(records) != 1:
            problems[name] = f"a scalar metric needs exactly one row, the result has {len(records)}"
        else:
            values[name] = records[0][name]
    return values, problems
