"""Calibration values: store cells as JSON values, and values moved past a tolerance."""

from __future__ import annotations

import math
from datetime import date, datetime
from decimal import Decimal

__all__ = ["PerturbError", "Scalar", "Value", "perturb_value", "plain_cell"]


class PerturbError(ValueError):
    """A value that cannot be perturbed (not finite)."""


Scalar = int | float | str | None
Value = Scalar | list[dict[str, Scalar]]
TEXT_SUFFIX = " (perturbed)"


def plain_cell(cell: object) -> Scalar:
    """A store cell as a JSON value, without losing precision a JSON number can hold."""
    if isinstance(cell, bool):
        return int(cell)
    if cell is None or isinstance(cell, int | float | str):
        return cell
    if isinstance(cell, Decimal):
        return int(cell) if cell == cell.to_integral_value() else float(cell)
    if isinstance(cell, datetime | date):
        return cell.isoformat()
    if isinstance(cell, bytes):
        return cell.hex()
    return str(cell)


def _step_past(value: int | float, tolerance: float) -> float:
    """`value` moved up (down at the top of the float range) by twice `tolerance`, doubling
    the step until the result is strictly more than `tolerance` away, compared as the
    decimals of their reprs as the scorer does."""
    if isinstance(value, float) and not math.isfinite(value):
        raise PerturbError(f"cannot perturb the non-finite value {value!r}")
    base = Decimal(repr(value))
    tol = Decimal(repr(tolerance))
    step = tolerance * 2 if tolerance > 0 else 1.0
    while True:
        moved = float(value) + step
        if not math.isfinite(moved):
            moved = float(value) - step
        if abs(Decimal(repr(moved)) - base) > tol:
            return moved
        step *= 2


def perturb_value(value: Value, kind: str, tolerance: float) -> Value:
    """A value the kind's comparison must reject: counts +1, numbers past the tolerance,
    text with a suffix, tables with every row's first numeric (else text) cell changed."""
    if isinstance(value, list):
        return [_perturb_row(row) for row in value] or [{"perturbed": 1}]
    if isinstance(value, str):
        return value + TEXT_SUFFIX
    if value is None:
        return "perturbed" if kind == "text" else 0
    if isinstance(value, int) and tolerance <= 0:
        return value + 1
    return _step_past(value, tolerance)


def _perturb_row(row: dict[str, Scalar]) -> dict[str, Scalar]:
    out = dict(row)
    numeric = [k for k, v in row.items() if isinstance(v, int | float)]
    text = [k for k, v in row.items() if isinstance(v, str)]
    if numeric:
        cell = row[numeric[0]]
        assert isinstance(cell, int | float)
        out[numeric[0]] = cell + 1
    elif text:
        out[text[0]] = f"{row[text[0]]}{TEXT_SUFFIX}"
    elif row:
        out[next(iter(row))] = 0
    else:
        out["perturbed"] = 1
    return out
