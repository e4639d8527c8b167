"""The reference of a prediction scenario over data of your own: the hidden labels of the
scoring cohort, read from the CSV file beside the scenario (`prediction.labels`, never in the
store), with the evaluator's baseline computed from the training table.

`backintel references build` locks `{"cohort": [{entity, label, baseline}]}` in the lock file,
after checking the split on the data (the scoring table has no label column, no entity is on
both sides, the labels name exactly the scoring entities) and the scenario's reference program
(`check_python`): it must meet every criterion on the data and lose its edge on both shuffled
copies (training labels permuted, scoring features shuffled), or the checks would fail an
honest program.
"""

from __future__ import annotations

import csv
import statistics
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pytest_backintel.evidence.prediction import CHECKS, shuffled_copy
from pytest_backintel.scenario import PredictionSpec, Scenario
from pytest_backintel.scoring.prediction import shortfall

__all__ = ["PredictionReferenceError", "calibrate", "labels_file", "own_cohort", "read_labels"]

Query = Callable[[str], list[dict[str, Any]]]


class PredictionReferenceError(ValueError):
    """The labels file, the split or the reference program is not right; `loc` is where in the
    scenario file."""

    def __init__(self, message: str, loc: tuple[str, ...] = ("prediction", "labels")) -> None:
        super().__init__(message)
        self.loc = loc


def labels_file(scenario: Scenario) -> Path:
    """The labels file, resolved against the scenario's folder."""
    spec = scenario.prediction
    assert spec is not None
    assert spec.labels is not None
    raw = Path(spec.labels)
    base = scenario.dataset.base_dir or Path.cwd()
    return raw if raw.is_absolute() else (base / raw).resolve()


def read_labels(path: Path, spec: PredictionSpec) -> dict[str, float]:
    """entity -> label from the CSV file (columns `entity` and `target`, one row per entity)."""
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as exc:
        raise PredictionReferenceError(f"cannot read the labels file {path}: {exc}") from exc
    out: dict[str, float] = {}
    for n, row in enumerate(rows, 2):
        if spec.entity not in row or spec.target not in row:
            raise PredictionReferenceError(
                f"{path}: the labels file needs the columns {spec.entity!r} and {spec.target!r}"
            )
        entity = row[spec.entity]
        try:
            label = float(row[spec.target])
        except (TypeError, ValueError):
            raise PredictionReferenceError(
                f"{path}:{n}: label {row[spec.target]!r} of {entity!r} is not a number"
            ) from None
        if spec.kind == "classification" and label not in (0.0, 1.0):
            raise PredictionReferenceError(f"{path}:{n}: a class label is 0 or 1, got {label!r}")
        if entity in out:
            raise PredictionReferenceError(f"{path}:{n}: {entity!r} is labelled twice")
        out[entity] = label
    if not out:
        raise PredictionReferenceError(f"{path}: the labels file has no rows")
    return out


def _baseline(spec: PredictionSpec, labels: list[float]) -> float:
    if spec.baseline == "median":
        return float(statistics.median(labels))
    return float(statistics.fmean(labels))  # prevalence of a 0/1 label, or the mean


def own_cohort(scenario: Scenario, query: Query) -> dict[str, Any]:
    """`{"cohort": [{entity, label, baseline}]}` from the labels file and the store (`query`
    runs SQLite-dialect SQL on a pristine copy), after checking the split."""
    spec = scenario.prediction
    assert spec is not None
    labels = read_labels(labels_file(scenario), spec)
    entity, target = f'"{spec.entity}"', f'"{spec.target}"'
    scoring_rows = query(f'SELECT * FROM "{spec.scoring_table}" LIMIT 1')
    if scoring_rows and spec.target in scoring_rows[0]:
        raise PredictionReferenceError(
            f"the scoring table {spec.scoring_table} holds the label column {spec.target!r}: "
            "the scoring labels must stay out of the store"
        )
    scoring = [str(r[spec.entity]) for r in query(f'SELECT {entity} FROM "{spec.scoring_table}"')]
    training = query(f'SELECT {entity}, {target} FROM "{spec.training_table}"')
    if both := sorted(set(scoring) & {str(r[spec.entity]) for r in training}):
        raise PredictionReferenceError(
            f"{len(both)} {spec.entity}(s) are in both {spec.training_table} and "
            f"{spec.scoring_table} (e.g. {both[0]!r}): each entity is on one side of the split"
        )
    if missing := sorted(set(scoring) - set(labels)):
        raise PredictionReferenceError(
            f"{len(missing)} scoring {spec.entity}(s) have no label (e.g. {missing[0]!r})"
        )
    if extra := sorted(set(labels) - set(scoring)):
        raise PredictionReferenceError(
            f"{len(extra)} labelled {spec.entity}(s) are not in {spec.scoring_table} "
            f"(e.g. {extra[0]!r})"
        )
    known = [float(r[spec.target]) for r in training if r[spec.target] is not None]
    if not known:
        raise PredictionReferenceError(f"{spec.training_table} has no labelled row")
    base = _baseline(spec, known)
    return {
        "cohort": [{"entity": e, "label": labels[e], "baseline": base} for e in sorted(scoring)]
    }


def calibrate(
    scenario: Scenario,
    reference: Mapping[str, Any],
    sqlite_path: Path,
    run: Callable[[Path], Mapping[str, Any]],
) -> None:
    """The reference program (`run` over a SQLite file) meets every criterion on the data and
    meets none-or-some, never all, on each shuffled copy."""
    spec = scenario.prediction
    assert spec is not None
    loc = ("check_python",)
    if short := shortfall(scenario, run(sqlite_path), reference):
        raise PredictionReferenceError(
            f"the reference program (check_python) does not meet the criteria: {short}", loc
        )
    what = {"labels": "the training labels permuted", "features": "the scoring features shuffled"}
    with tempfile.TemporaryDirectory(prefix="backintel-shuffled-") as tmp:
        for check in CHECKS:
            copy = shuffled_copy(sqlite_path, spec, Path(tmp), check)
            if not shortfall(scenario, run(copy), reference):
                raise PredictionReferenceError(
                    f"with {what[check]} (seed {spec.permutation_seed}) the reference program "
                    "still meets every criterion, so that check would fail an honest program; "
                    "raise the margins",
                    loc,
                )
