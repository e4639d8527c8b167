"""Value comparison by metric kind: the only place tolerances live.

Counts are exact; currency agrees to half a minor unit (±0.005 in major units); ratios and
durations to 1e-6 absolute; text exactly after declared normalisation; tables row by row with
declared key and order. No number is read out of a string, signs are kept, NULL is never zero,
and booleans are not numbers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from pytest_backintel.scenario import ColumnSpec, MetricKind, MetricSpec

__all__ = [
    "NOISE",
    "TOLERANCE",
    "Comparison",
    "compare_metric",
    "compare_scalar",
    "reproduces",
    "tolerance_for",
]

TOLERANCE: dict[str, Decimal] = {
    "count": Decimal(0),
    "currency": Decimal("0.005"),
    "ratio": Decimal("0.000001"),
    "duration": Decimal("0.000001"),
}


NOISE = Decimal("1e-9")
"""Evidence must reproduce a reported number to floating-point noise: relative to its size,
at least absolutely (counts exactly)."""


@dataclass(frozen=True)
class Comparison:
    ok: bool
    detail: str = ""


def tolerance_for(kind: str) -> float:
    """The absolute tolerance of a numeric kind (0 for count, text and table)."""
    return float(TOLERANCE.get(kind, Decimal(0)))


def _as_decimal(value: Any) -> Decimal | None:
    """A JSON number as Decimal via its shortest repr; None for anything that is not a number."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, Decimal):
        return value if value.is_finite() else None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        try:
            return Decimal(repr(value))
        except InvalidOperation:
            return None
    return None


def _normalise_text(value: str, steps: Sequence[str]) -> str:
    for step in steps:
        if step == "strip":
            value = value.strip()
        elif step == "casefold":
            value = value.casefold()
        elif step == "collapse_whitespace":
            value = re.sub(r"\s+", " ", value)
    return value


def compare_scalar(
    kind: str,
    expected: Any,
    got: Any,
    normalize: Sequence[str] = ("strip",),
    *,
    exact: bool = False,
) -> Comparison:
    """Compare one reported value with the reference under the kind's rule (`exact`: to
    floating-point noise instead of the kind's tolerance, for evidence against the answer)."""
    if expected is None or got is None:
        if expected is None and got is None:
            return Comparison(True)
        return Comparison(False, f"expected {expected!r}, got {got!r} (NULL is never a value)")
    if kind == "text":
        if not isinstance(got, str):
            return Comparison(False, f"expected text, got {type(got).__name__} {got!r}")
        ok = _normalise_text(got, normalize) == _normalise_text(str(expected), normalize)
        return Comparison(ok, "" if ok else f"expected {expected!r}, got {got!r}")
    exp, val = _as_decimal(expected), _as_decimal(got)
    if isinstance(got, bool):
        return Comparison(False, f"expected a number, got the boolean {got!r} (not a number)")
    if val is None:
        return Comparison(False, f"expected a number, got {type(got).__name__} {got!r}")
    if exp is None:
        return Comparison(False, f"reference {expected!r} is not a number")
    if kind == "count" and val != val.to_integral_value():
        return Comparison(False, f"expected a whole count {exp}, got {got!r}")
    tol = TOLERANCE[kind]
    if exact and kind != "count":
        tol = NOISE * max(Decimal(1), abs(exp))
    elif exact:
        tol = Decimal(0)
    diff = abs(val - exp)
    ok = diff <= tol
    rule = "not exactly: evidence must reproduce it" if exact else f"tolerance {tol}"
    return Comparison(ok, "" if ok else f"expected {exp}, got {val} (off by {diff}, {rule})")


def _row_key(row: dict[str, Any], key: Sequence[str]) -> tuple[str, ...]:
    return tuple(repr(row.get(k)) for k in key)


def _compare_rows(
    columns: Sequence[ColumnSpec],
    expected: dict[str, Any],
    got: dict[str, Any],
    normalize: Sequence[str],
    where: str,
    exact: bool = False,
) -> Comparison:
    for col in columns:
        if col.name not in got:
            return Comparison(False, f"{where}: column {col.name!r} is missing")
        cmp = compare_scalar(
            col.kind, expected.get(col.name), got[col.name], normalize, exact=exact
        )
        if not cmp.ok:
            return Comparison(False, f"{where}, column {col.name!r}: {cmp.detail}")
    return Comparison(True)


def compare_table(spec: MetricSpec, expected: Any, got: Any, exact: bool = False) -> Comparison:
    """Row by row: same row count, rows matched by key (or position when ordered/keyless)."""
    if not isinstance(got, list) or not all(isinstance(r, dict) for r in got):
        return Comparison(False, f"expected rows (a list of objects), got {type(got).__name__}")
    if not isinstance(expected, list):
        return Comparison(False, "reference is not a table")
    if len(got) != len(expected):
        return Comparison(False, f"expected {len(expected)} rows, got {len(got)}")
    if spec.ordered or not spec.key:
        pairs = list(zip(expected, got, strict=True))
        if not spec.ordered:
            keyed = [c.name for c in spec.columns]
            pairs = list(
                zip(
                    sorted(expected, key=lambda r: _row_key(r, keyed)),
                    sorted(got, key=lambda r: _row_key(r, keyed)),
                    strict=True,
                )
            )
        for i, (e, g) in enumerate(pairs, 1):
            cmp = _compare_rows(spec.columns, e, g, spec.normalize, f"row {i}", exact)
            if not cmp.ok:
                return cmp
        return Comparison(True)
    by_key = {}
    for row in got:
        k = _row_key(row, spec.key)
        if k in by_key:
            return Comparison(False, f"key {dict(zip(spec.key, k, strict=True))} appears twice")
        by_key[k] = row
    for e in expected:
        k = _row_key(e, spec.key)
        if k not in by_key:
            return Comparison(False, f"row with key {dict(zip(spec.key, k, strict=True))} missing")
        cmp = _compare_rows(spec.columns, e, by_key[k], spec.normalize, f"row {k}", exact)
        if not cmp.ok:
            return cmp
    return Comparison(True)


def compare_metric(spec: MetricSpec, expected: Any, got: Any) -> Comparison:
    """Compare a reported metric value with its reference under the metric's kind."""
    if spec.kind is MetricKind.TABLE:
        return compare_table(spec, expected, got)
    return compare_scalar(spec.kind.value, expected, got, spec.normalize)


def reproduces(spec: MetricSpec, produced: Any, reported: Any) -> Comparison:
    """Whether evidence output `produced` is exactly the `reported` value (counts exactly,
    other numbers to floating-point noise): tolerance is never stacked on evidence."""
    if spec.kind is MetricKind.TABLE:
        return compare_table(spec, produced, reported, exact=True)
    return compare_scalar(spec.kind.value, produced, reported, spec.normalize, exact=True)
