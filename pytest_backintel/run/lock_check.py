"""References checked at session start, before the first analyst request.

(And scenario ids of your own given by two files in one run, refused the same way.)

Every answerable scenario bound to data of your own takes its reference from the lock file
beside it. A lock computed on other data, or from another reference spec, is refused here in
one usage error naming each scenario and both hashes, so no token is spent on a trial whose
answer could not be scored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from pytest_backintel.collect.loading import SCHEMA_PATH, load_scenario_file
from pytest_backintel.collect.lockfile import LockError, reference_for
from pytest_backintel.collect.user_data import user_source
from pytest_backintel.scenario import Scenario
from stores.base import DatasetFiles, StoreError

__all__ = [
    "check_collected",
    "check_references",
    "check_worker_ids",
    "duplicate_ids",
    "reference_problems",
]

Dataset = Callable[[Scenario], tuple[DatasetFiles, str]]


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
            files, data_hash = dataset(scenario)
            if (source := user_source(scenario.dataset)) is not None:
                source.reference(scenario, files, data_hash)  # by its fingerprint method
            else:
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


def duplicate_ids(files: Iterable[tuple[Path, Scenario]]) -> list[str]:
    """Scenario ids given by two different files of your own in one run (their trials would
    be merged as one case's): each named with both files."""
    first: dict[str, Path] = {}
    out = []
    for path, scenario in files:
        seen = first.setdefault(scenario.id, path)
        if seen != path:
            out.append(f"scenario id {scenario.id!r} is given by both {seen} and {path}")
    return list(dict.fromkeys(out))


def _check(files: list[tuple[Path, Scenario]], dataset: Dataset) -> None:
    if dupes := duplicate_ids(files):
        lines = "\n".join(f"  - {d}" for d in dupes)
        raise pytest.UsageError(
            f"refusing to start: one run measures each scenario id once:\n{lines}\n(to run one "
            "suite over other data, bind its dataset alias with --dataset instead of copying it)"
        )
    check_references([s for _, s in files], dataset)


def check_collected(config: pytest.Config, items: list[pytest.Item], dataset: Dataset) -> None:
    """After collection in a process that runs its items itself (xdist workers leave it to
    the controller, `check_worker_ids`); a usage error stops the run before any trial."""
    if config.option.collectonly or hasattr(config, "workerinput"):
        return
    files = [
        (i.path, i.scenario)  # type: ignore[attr-defined]
        for i in items
        if getattr(i, "suite_policy", None) is not None  # a scenario file of your own
    ]
    _check(files, dataset)


_CHECKED = pytest.StashKey[bool]()


def check_worker_ids(config: pytest.Config, nodeids: list[str], dataset: Dataset) -> None:
    """xdist controller, when a worker has collected: the same check over the scenario files
    the node ids name, once per run, before the scheduler sends any item; it ends the run
    with a usage error (`pytest.exit`) rather than letting workers start."""
    if config.stash.get(_CHECKED, False):
        return
    config.stash[_CHECKED] = True
    names = sorted({nodeid.split("::", 1)[0] for nodeid in nodeids})
    paths = [config.rootpath / f for f in names if f.endswith(".scenario.yaml")]
    own = [p for p in paths if not p.resolve().is_relative_to(SCHEMA_PATH.parent)]
    try:
        _check([(p, load_scenario_file(p)) for p in own], dataset)
    except pytest.UsageError as exc:
        pytest.exit(f"ERROR: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
