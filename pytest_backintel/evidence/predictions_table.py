"""A predictions table read strictly, and a re-run's predictions compared with the reported
ones within the scenario's declared tolerance."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_backintel.scenario import PredictionSpec

__all__ = ["Compared", "compare_predictions", "prediction_rows"]


def prediction_rows(spec: PredictionSpec, value: Any) -> tuple[dict[str, float], list[str]]:
    """entity -> prediction from a predictions table (a list of row objects), and what is
    wrong with it (not rows, a missing column, a repeated entity, a non-finite number, a
    probability outside [0, 1])."""
    if not isinstance(value, list):
        return {}, [f"the predictions must be a list of rows, got {type(value).__name__}"]
    out: dict[str, float] = {}
    problems: list[str] = []
    for i, row in enumerate(value):
        if not isinstance(row, Mapping) or spec.entity not in row or spec.value not in row:
            problems.append(f"row {i} is not an object with {spec.entity!r} and {spec.value!r}")
            continue
        entity, raw = str(row[spec.entity]), row[spec.value]
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
            problems.append(f"{spec.entity}={entity}: {spec.value} {raw!r} is not a finite number")
            continue
        if spec.kind == "classification" and not 0.0 <= float(raw) <= 1.0:
            problems.append(f"{spec.entity}={entity}: probability {raw!r} is outside [0, 1]")
            continue
        if entity in out:
            problems.append(f"{spec.entity}={entity} is predicted more than once")
        out[entity] = float(raw)
    return out, problems[:20]


@dataclass(frozen=True)
class Compared:
    """Whether two predictions tables agree, and why not."""

    ok: bool
    detail: str = ""


def compare_predictions(spec: PredictionSpec, produced: Any, reported: Any) -> Compared:
    """Whether the re-run's predictions are the reported ones, entity by entity, within the
    declared tolerance."""
    got, bad = prediction_rows(spec, produced)
    want, _ = prediction_rows(spec, reported)
    if bad:
        return Compared(False, "the program's predictions are malformed: " + "; ".join(bad[:3]))
    if set(got) != set(want):
        missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
        return Compared(
            False,
            f"the program predicts other entities: {len(missing)} reported but not produced "
            f"{missing[:3]}, {len(extra)} produced but not reported {extra[:3]}",
        )
    far = sorted((abs(got[e] - want[e]), e) for e in want if abs(got[e] - want[e]) > spec.tolerance)
    if far:
        _diff, entity = far[-1]
        return Compared(
            False,
            f"{len(far)} of {len(want)} predictions differ by more than the tolerance "
            f"{spec.tolerance:g} (largest: {spec.entity}={entity}, produced {got[entity]!r}, "
            f"reported {want[entity]!r})",
        )
    return Compared(True)
