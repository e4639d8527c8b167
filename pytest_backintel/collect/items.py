"""Scenario files become pytest items: one per scenario and trial, with markers and keywords."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from _pytest._code.code import TerminalRepr
from _pytest._io import TerminalWriter

from pytest_backintel.collect.backends import store_spec, unmeasurable_on
from pytest_backintel.collect.loading import SCHEMA_PATH, ScenarioFileError, load_scenario_file
from pytest_backintel.collect.suites import own_suite
from pytest_backintel.collect.user_data import check_world
from pytest_backintel.options import BenchOptions
from pytest_backintel.scenario import Scenario
from stores.common.dsn import redact

__all__ = [
    "RUNNER_KEY",
    "ItemFailure",
    "ItemRunner",
    "ScenarioFile",
    "ScenarioItem",
    "binding_lines",
    "is_boundary",
    "is_scenario_file",
    "markers_for",
    "model_slug",
    "suites_of",
]

SUFFIX = ".scenario.yaml"


def model_slug(model: str) -> str:
    """A model string as a folder name and item id part: `openai:gpt-5.1` -> `openai-gpt-5.1`
    (letters, digits, `.`, `_` and `-`; anything else becomes `-`)."""
    return re.sub(r"[^A-Za-z0-9._]+", "-", model).strip("-.") or "model"


def is_scenario_file(name: str) -> bool:
    return name.endswith(SUFFIX)


def store_marker(backend: str) -> str:
    """`store_<backend>` with dashes as underscores, usable in `-m` expressions (a spec's
    options after the first `:` are left out: `multi:...` is `store_multi`)."""
    return "store_" + backend.split(":", 1)[0].replace("-", "_")


def markers_for(scenario: Scenario, backend: str) -> list[str]:
    return [
        scenario.split.value,
        "answerable" if scenario.answerable else "unanswerable",
        f"level{scenario.level}",
        store_marker(backend),
        *(["boundaries"] if is_boundary(scenario) else []),
        *(["prediction"] if scenario.prediction is not None else []),
    ]


def is_boundary(scenario: Scenario) -> bool:
    """A scenario testing the boundaries the analyst must keep (scope, grants, plants)."""
    return scenario.scope is not None or bool(scenario.planted)


class ScenarioFile(pytest.File):
    """A `*.scenario.yaml` file: validated, then one item per trial."""

    def collect(self) -> Iterator[ScenarioItem]:
        bench = self.config.stash[RUNNER_KEY]
        scenario = load_scenario_file(self.path)
        check_world(self.path, scenario)
        sha = hashlib.sha256(self.path.read_bytes()).hexdigest()
        shipped = self.path.resolve().is_relative_to(SCHEMA_PATH.parent)
        suite, policy = ("benchmark", None) if shipped else own_suite(self.path)
        models: list[str | None] = [*sorted(bench.options.models, key=model_slug)] or [None]
        for trial in range(1, bench.options.trials + 1):
            for model in models:  # a matrix: each trial once per model, the models interleaved
                item = ScenarioItem.from_scenario(
                    self, scenario, trial, sha, store_spec(scenario, bench.options.store), model
                )
                item.suite, item.suite_policy = suite, policy
                yield item

    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: Any = None,
    ) -> str | TerminalRepr:
        if isinstance(excinfo.value, ScenarioFileError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class ItemFailure(Exception):
    """A trial that did not pass, raised by the runner; rendered by `ScenarioItem.repr_failure`
    with the lines it gives."""

    def lines(self) -> list[str]:
        return [str(self)]


class ItemRunner(Protocol):
    """What collection needs of the bench session (set under `RUNNER_KEY` at configure)."""

    options: BenchOptions
    reserved_cases: dict[str, set[str]]

    def run_item(self, item: ScenarioItem, store: Any, python: Any) -> None: ...


RUNNER_KEY = pytest.StashKey[ItemRunner]()


def _scenario_test(
    request: pytest.FixtureRequest, backintel_store: Any, backintel_python: Any
) -> None:
    """The body of every scenario item: hand off to the bench session."""
    item = request.node
    assert isinstance(item, ScenarioItem)
    request.config.stash[RUNNER_KEY].run_item(item, backintel_store, backintel_python)


class ScenarioItem(pytest.Function):
    """One trial of one scenario; fixtures are resolved by pytest from `_scenario_test`."""

    scenario: Scenario
    trial: int
    scenario_sha: str
    manifest: Path | None = None
    """The acceptance/regression manifest the case came from (None for a scenario file)."""
    suite: str = "benchmark"
    suite_policy: dict[str, Any] | None = None
    """A user's own suite's comparison policy (None: the shipped benchmark's promotion)."""
    model: str | None = None
    """The model of a model matrix this trial measures (None: the run's one model)."""

    @classmethod
    def from_scenario(
        cls,
        parent: pytest.File,
        scenario: Scenario,
        trial: int,
        sha: str,
        backend: str,
        model: str | None = None,
    ) -> ScenarioItem:
        """The item `<id>[t<trial>]`, or in a model matrix `<id>[t<trial>-<model slug>]` (so
        a scenario's trials of every model run one after another, in sorted id order)."""
        part = f"t{trial}" if model is None else f"t{trial}-{model_slug(model)}"
        item: ScenarioItem = cls.from_parent(
            parent,
            name=f"{scenario.id}[{part}]",
            callobj=_scenario_test,
        )
        item.scenario, item.trial, item.scenario_sha = scenario, trial, sha
        item.model = model
        for name in markers_for(scenario, backend):
            item.add_marker(name)
        if (why := unmeasurable_on(scenario, backend)) is not None:
            item.add_marker(pytest.mark.skip(reason=why))
        item.extra_keyword_matches.add(scenario.family)
        return item

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return (
            self.path,
            0,
            f"scenario {self.scenario.id} v{self.scenario.version} trial {self.trial}",
        )

    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: Any = None,
    ) -> str | TerminalRepr:
        if isinstance(excinfo.value, ItemFailure):
            return FailureRepr(excinfo.value.lines())
        return super().repr_failure(excinfo)


class FailureRepr(TerminalRepr):
    """The failure's own lines: question, outcome, each metric's checks, the evidence."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def toterminal(self, tw: TerminalWriter) -> None:
        for line in self.lines:
            tw.line(line)


def suites_of(items: list[Any]) -> dict[str, dict[str, Any]]:
    """The user's own suites among `items`: name -> policy (for run.json `suites`)."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        policy = getattr(item, "suite_policy", None)
        if policy is not None:
            out.setdefault(item.suite, {"policy": policy})
    return dict(sorted(out.items()))


def binding_lines(items: list[Any], default_store: str) -> list[str]:
    """The terminal lines naming each dataset of the collected items and the store it really
    runs on (a source of your own on its own backend, whatever `--store` says)."""
    seen: dict[str, str] = {}
    for item in items:
        scenario = getattr(item, "scenario", None)
        if not isinstance(item, ScenarioItem) or scenario is None:
            continue
        binding = scenario.dataset
        shown = redact(binding.source or "")
        where = f"{binding.source_kind} {shown}" if binding.source_kind else "world"
        seen.setdefault(
            f"{binding.world}: {where}", store_spec(scenario, default_store).split(":", 1)[0]
        )
    return [f"backintel: dataset {name} on store {store}" for name, store in sorted(seen.items())]
