"""Acceptance and regression manifests: JSON suites whose cases become scenario items.

A manifest is `{"suite": ..., "cases": [{"scenario": {...}, "reference": {...}, "trials": n,
...}]}`. Only the scenario part is kept at collection; references are read again, from disk,
after the analyst has answered.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections.abc import Iterator, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from _pytest._code.code import TerminalRepr
from pydantic import ValidationError

from pytest_backintel.collect.backends import store_spec
from pytest_backintel.collect.install import INSTALLED
from pytest_backintel.collect.items import RUNNER_KEY, ScenarioItem
from pytest_backintel.collect.loading import ScenarioFileError
from pytest_backintel.collect.sealed import SealedCase, SealedSuiteError, SealedWorld, sealed_items
from pytest_backintel.scenario import Scenario

__all__ = [
    "DEFAULT_MANIFESTS",
    "ManifestFile",
    "is_manifest",
    "manifest_reference",
    "unseal_items",
]

DEFAULT_MANIFESTS = [
    "scenarios/acceptance/acceptance-v1/*.json",
    "scenarios/acceptance/original-regression.json",
]


def is_manifest(config: pytest.Config, path: Path) -> bool:
    if path.suffix != ".json":
        return False
    patterns = config.getini("backintel_manifests") or DEFAULT_MANIFESTS
    for base in (config.rootpath, INSTALLED):  # the installed suites, as `--pyargs scenarios`
        if path.is_relative_to(base):
            rel = path.relative_to(base).as_posix()
            if any(fnmatch.fnmatch(rel, pattern) for pattern in patterns):
                return True
    return False


MANIFEST_STORE = "sqlite"
"""Acceptance and regression cases run on their bound SQLite stores, whatever `--store` says
(the acceptance spec binds them), unless a case's dataset names another store itself."""


def bound(scenario: Scenario) -> Scenario:
    """The manifest case with its store binding made explicit (SQLite unless it names one)."""
    if scenario.dataset.store is not None:
        return scenario
    dataset = scenario.dataset.model_copy(update={"store": MANIFEST_STORE})
    return scenario.model_copy(update={"dataset": dataset})


def _read(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"), parse_float=Decimal)
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise ScenarioFileError(path, [(1, "cases", "a manifest holds {'suite', 'cases': [...]}")])
    return data


def manifest_reference(path: Path, case_id: str) -> Mapping[str, Any]:
    """The reference values of one case, read from the manifest on disk (after answering)."""
    for case in _read(path)["cases"]:
        if case["scenario"]["id"] == case_id:
            reference: Mapping[str, Any] = case.get("reference") or {}
            return reference
    raise KeyError(f"{path}: no case {case_id!r}")


class ManifestFile(pytest.File):
    """One manifest: one item per case and trial (a case may preselect its trial count).

    A sealed manifest (a reserved suite's commitment, `pytest_backintel.collect.sealed`) yields
    placeholders until a frozen run unseals it and swaps in `unsealed_items`."""

    suite: str = ""
    sealed_world: str = ""

    def collect(self) -> Iterator[pytest.Item]:
        bench = self.config.stash[RUNNER_KEY]
        data = _read(self.path)
        self.suite = str(data.get("suite", self.path.stem))
        if isinstance(data.get("sealed"), dict):
            self.sealed_world = str(data["sealed"].get("world", ""))
            cases = list(data["cases"])
            bench.reserved_cases.setdefault(self.suite, set()).update(str(c["id"]) for c in cases)
            yield from sealed_items(self, cases, bench.options.trials, bench.options.store)
            return
        yield from self._items(data, self.path)

    def unsealed_items(self, manifest: Path) -> Iterator[ScenarioItem]:
        """The real items of this sealed suite, from the manifest `unseal` generated."""
        yield from self._items(_read(manifest), manifest)

    def _items(self, data: dict[str, Any], manifest: Path) -> Iterator[ScenarioItem]:
        bench = self.config.stash[RUNNER_KEY]
        for index, case in enumerate(data["cases"]):
            try:
                scenario = bound(Scenario.model_validate(case.get("scenario")))
            except ValidationError as exc:
                first = exc.errors()[0]
                field = ".".join(str(p) for p in first["loc"])
                raise ScenarioFileError(
                    manifest, [(1, f"cases[{index}].scenario.{field}", first["msg"])]
                ) from exc
            sha = hashlib.sha256(
                json.dumps(case["scenario"], sort_keys=True, default=str).encode()
            ).hexdigest()
            if scenario.split.value == "reserved":
                bench.reserved_cases.setdefault(self.suite, set()).add(scenario.id)
            trials = int(case.get("trials") or bench.options.trials)
            for trial in range(1, trials + 1):
                spec = store_spec(scenario, bench.options.store)
                item = ScenarioItem.from_scenario(self, scenario, trial, sha, spec)
                item.manifest = manifest
                item.suite = self.suite
                yield item

    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: Any = None,
    ) -> str | TerminalRepr:
        if isinstance(excinfo.value, ScenarioFileError | json.JSONDecodeError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


def find_manifest_case(root: Path, case_id: str) -> tuple[Path, Scenario] | None:
    """The manifest and scenario of case `case_id` among the default manifests under `root`."""
    for pattern in DEFAULT_MANIFESTS:
        for path in sorted(root.glob(pattern)):
            for case in _read(path)["cases"]:
                if case.get("scenario", {}).get("id") == case_id:
                    return path, bound(Scenario.model_validate(case["scenario"]))
    return None


def unseal_items(items: list[pytest.Item], data_dir: Path) -> list[dict[str, Any]]:
    """Replace every sealed placeholder by its real item, unsealing each suite once; returns
    what each unsealing verified (for the freeze lock)."""
    from pytest_backintel.collect.worlds import get_world

    records = []
    real: dict[str, ScenarioItem] = {}
    parents = {i.parent for i in items if isinstance(i, SealedCase)}
    for parent in sorted((p for p in parents if isinstance(p, ManifestFile)), key=str):
        world = get_world(parent.sealed_world)
        if not isinstance(world, SealedWorld):
            raise SealedSuiteError(f"{parent.path}: world {parent.sealed_world!r} cannot unseal")
        manifest, record = world.unseal(parent.path, data_dir)
        records.append(record | {"commitment_file": str(parent.path), "manifest": str(manifest)})
        real |= {i.nodeid: i for i in parent.unsealed_items(manifest)}
    for index, item in enumerate(items):
        if isinstance(item, SealedCase):
            if item.nodeid not in real:
                raise SealedSuiteError(f"{item.nodeid}: the unsealed suite has no such item")
            items[index] = real[item.nodeid]
    return records
