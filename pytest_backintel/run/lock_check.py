"""References checked at session start, before the first analyst request.

Every answerable scenario bound to data of your own takes its reference from the lock file
beside it. A lock computed on other data, or from another reference spec, is refused here in
one usage error naming each scenario and both hashes, so no token is spent on a trial whose
answer could not be scored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest

from pytest_backintel.lockfile import LockError, reference_for
from pytest_backintel.scenario import Scenario
from stores.base import DatasetFiles, StoreError

__all__ = ["check_references", "reference_problems"]


def reference_problems(
    scenarios: Iterable[Scenario], dataset: Callable[[Scenario], tuple[DatasetFiles, str]]
) -> list[str]:
    """Why each answerable scenario of your own cannot take its locked reference on the data
    this run binds (`dataset` gives the built files and their data hash); [] when all can."""
    problems: list[str] = []
    seen: set[str] = set()
    for scenario in scenarios:
        key = f"{scenario.id}@{scenario.dataset.base_dir}"
        if key in seen or not scenario.answerable or scenario.dataset.source_kind is None:
            continue
        seen.add(key)
        try:
            _, data_hash = dataset(scenario)
            reference_for(scenario, data_hash)
        except LockError as exc:
            problems.append(str(exc))
        except StoreError as exc:
            problems.append(f"scenario {scenario.id!r}: its data cannot be read: {exc}")
    return problems


def check_references(
    scenarios: Iterable[Scenario], dataset: Callable[[Scenario], tuple[DatasetFiles, str]]
) -> None:
    """`pytest.UsageError` listing every scenario whose locked reference does not fit."""
    if problems := reference_problems(scenarios, dataset):
        lines = "\n".join(f"  - {p}" for p in problems)
        raise pytest.UsageError(
            f"refusing to start: {len(problems)} scenario(s) cannot be scored on this run's "
            f"data (nothing was sent to the analyst):\n{lines}"
        )
