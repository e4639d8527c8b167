"""References of prediction scenarios: the scoring cohort's hidden labels and the evaluator's
baseline, kept with the committed references (never in the store).

Building them also calibrates the scenario: its reference program (`check_python`) must meet
every criterion against the baseline, and must lose its edge when re-run with the training
labels permuted and when re-run with the scoring features shuffled (or those checks would fail
an honest program).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from pytest_backintel.collect.prediction_refs import PredictionReferenceError, calibrate
from pytest_backintel.scenario import Scenario
from scenarios.reference_errors import ReferenceError, ReferenceMismatchError
from scenarios.world_base import World
from stores.base import DatasetFiles

__all__ = ["PredictionWorld", "prediction_reference"]


class PredictionWorld(Protocol):
    def hidden_cohort(self, training_table: str, baseline: str) -> list[dict[str, Any]]: ...


def prediction_reference(
    scenario: Scenario,
    world: World,
    files: DatasetFiles,
    run: Callable[[Path], Mapping[str, Any]],
) -> dict[str, Any]:
    """{"cohort": [{entity, label, baseline}]} of a prediction scenario, after checking its
    reference program (run by `run` over a SQLite file) on the data and on both shuffled copies."""
    spec = scenario.prediction
    assert spec is not None
    hidden = getattr(world, "hidden_cohort", None)
    if hidden is None or files.sqlite_path is None:
        raise ReferenceError(
            f"scenario {scenario.id!r}: world {world.name!r} keeps no hidden scoring cohort "
            "(a prediction world has `hidden_cohort` and a SQLite build)"
        )
    reference = {"cohort": hidden(spec.training_table, spec.baseline)}
    try:
        calibrate(scenario, reference, files.sqlite_path, run)
    except PredictionReferenceError as exc:
        raise ReferenceMismatchError(f"scenario {scenario.id!r}: {exc}") from exc
    return reference
