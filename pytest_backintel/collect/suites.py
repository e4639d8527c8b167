"""Suite files: `backintel-suite.yaml` gives the defaults of every scenario file in its folder
and below, so a folder of scenarios binds its dataset once.

```yaml
# scenarios/backintel-suite.yaml
dataset: {sqlite: ../shop.sqlite}   # relative to this file
split: development
```

A suite file may give `dataset`, `split`, `level` and `family` (`SHARED`), and four fields of
its own (`SUITE_ONLY`): `name` (the suite's name in records and comparisons; default: the
suite file's folder name), `policy` (how `backintel compare` decides: `mandatory` case ids,
`controls` that must not regress, `alpha` the significance level), `datasets` (aliases a
scenario names as `dataset: <alias>`, each bound to one source, relative to this file) and
`models` (the models a run of this folder measures when `--model` is not given: two or more
make a model matrix, see `pytest_backintel.run.matrix`) and `analyst` (the analyst a run of
this folder measures when `--analyst` is not given, a `cmd:` agent's paths relative to this
file, see `pytest_backintel.run.suite_run`). A scenario takes
each field it does not give itself from the nearest suite file above it (its own folder
first, then each parent up to the project root: the first folder holding `pyproject.toml` or
`.git`; an installed package's scenarios look no higher than their package); a field the
scenario gives wins whole (its own `dataset` replaces the suite's).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pytest_backintel.analyst_api import analyst_problem
from pytest_backintel.scenario import DSN_KINDS
from stores.common.dsn import redact

__all__ = [
    "SHARED",
    "SUITE_FILE",
    "SUITE_ONLY",
    "Suite",
    "SuiteFileError",
    "check_suite_fields",
    "inherited",
    "nearest",
    "own_suite",
    "rebind",
    "rebound",
    "resolve_alias",
    "suite_policy",
    "suites_above",
]

SUITE_FILE = "backintel-suite.yaml"
SHARED = ("dataset", "split", "level", "family")
"""The scenario fields a suite file may give."""
SUITE_ONLY = ("name", "policy", "datasets", "models", "analyst")
"""The suite file's own fields: its name, its comparison policy, its dataset aliases, the
models a run of its folder measures (two or more: a model matrix; `--model` overrides) and its
analyst (`--analyst` overrides)."""
_ROOT_MARKERS = ("pyproject.toml", ".git")


class SuiteFileError(Exception):
    """A suite file is invalid: `problems` are `(line, field, what is wrong)`."""

    def __init__(self, path: Path, problems: list[tuple[int, str, str]]) -> None:
        self.path = path
        self.problems = problems
        super().__init__("; ".join(f"{path}:{line}: {f}: {msg}" for line, f, msg in problems))


@dataclass(frozen=True)
class Suite:
    """One suite file: its defaults and the line each one is given on."""

    path: Path
    defaults: dict[str, Any]
    lines: dict[str, int]
    own: dict[str, Any] = field(default_factory=dict)
    """`SUITE_ONLY` fields as given (validated by `pytest_backintel.policy`)."""


_CACHE: dict[Path, tuple[int, int, Suite]] = {}


def _read(path: Path) -> Suite:
    """The suite file at `path`, validated (cached while the file is unchanged)."""
    stat = path.stat()
    cached = _CACHE.get(path)
    if cached is not None and cached[:2] == (stat.st_mtime_ns, stat.st_size):
        return cached[2]
    text = path.read_text(encoding="utf-8")
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        line = (exc.problem_mark.line + 1) if exc.problem_mark else 1
        raise SuiteFileError(path, [(line, "", f"invalid YAML: {exc.problem}")]) from exc
    if root is None:
        suite = Suite(path, {}, {})
    elif not isinstance(root, yaml.MappingNode):
        raise SuiteFileError(path, [(1, "", "a suite file holds one YAML mapping")])
    else:
        problems: list[tuple[int, str, str]] = []
        lines = {}
        for key, _ in root.value:
            lines[str(key.value)] = key.start_mark.line + 1
            if key.value not in SHARED + SUITE_ONLY:
                problems.append(
                    (
                        key.start_mark.line + 1,
                        str(key.value),
                        f"unknown field; a suite file gives {', '.join(SHARED + SUITE_ONLY)}",
                    )
                )
        if problems:
            raise SuiteFileError(path, problems)
        data = dict(yaml.safe_load(text))
        shared = {k: v for k, v in data.items() if k in SHARED}
        own = {k: v for k, v in data.items() if k in SUITE_ONLY}
        suite = Suite(path, shared, lines, own)
        if problems := check_suite_fields(suite):
            raise SuiteFileError(path, problems)
    _CACHE[path] = (stat.st_mtime_ns, stat.st_size, suite)
    return suite


POLICY_FIELDS = {"mandatory": list, "controls": list, "alpha": float}
DEFAULT_ALPHA = 0.05


def _problem(suite: Suite, key: str, field_name: str, msg: str) -> tuple[int, str, str]:
    return (suite.lines.get(key, 1), field_name, msg)


def check_suite_fields(suite: Suite) -> list[tuple[int, str, str]]:
    """Problems of a suite file's own fields (`name`, `policy`, `models`, `analyst`,
    `datasets`)."""
    from pydantic import ValidationError

    from pytest_backintel.scenario import DatasetBinding

    out: list[tuple[int, str, str]] = []
    name = suite.own.get("name")
    if "name" in suite.own and not (isinstance(name, str) and name.strip()):
        out.append(_problem(suite, "name", "name", f"a non-empty text, got {name!r}"))
    policy = suite.own.get("policy", {})
    if not isinstance(policy, dict):
        out.append(_problem(suite, "policy", "policy", f"a mapping, got {policy!r}"))
        policy = {}
    for key, value in policy.items():
        if key not in POLICY_FIELDS:
            allowed = ", ".join(POLICY_FIELDS)
            out.append(_problem(suite, "policy", f"policy.{key}", f"unknown; allowed: {allowed}"))
        elif key == "alpha" and not (
            isinstance(value, float | int) and not isinstance(value, bool) and 0 < value < 1
        ):
            out.append(
                _problem(suite, "policy", "policy.alpha", f"a number in (0, 1), got {value!r}")
            )
        elif key != "alpha" and not (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        ):
            out.append(
                _problem(suite, "policy", f"policy.{key}", f"a list of case ids, got {value!r}")
            )
    models = suite.own.get("models", [])
    if not (
        isinstance(models, list)
        and all(isinstance(m, str) and m.strip() for m in models)
        and len(set(models)) == len(models)
    ):
        msg = "a list of distinct model strings (e.g. [openai:gpt-5.1, openai:gpt-5-mini])"
        msg += f", got {models!r}"
        out.append(_problem(suite, "models", "models", msg))
    if "analyst" in suite.own and (bad := analyst_problem(suite.own["analyst"], suite=True)):
        out.append(_problem(suite, "analyst", "analyst", bad))
    datasets = suite.own.get("datasets", {})
    if not isinstance(datasets, dict):
        out.append(_problem(suite, "datasets", "datasets", f"a mapping, got {datasets!r}"))
        datasets = {}
    for alias, binding in datasets.items():
        try:
            DatasetBinding.model_validate(binding)
        except ValidationError as exc:
            msg = "; ".join(e["msg"] for e in exc.errors())
            out.append(_problem(suite, "datasets", f"datasets.{alias}", msg))
    return out


def suite_policy(suite: Suite | None) -> dict[str, Any]:
    """The comparison policy a suite file declares, with defaults filled in."""
    given = suite.own.get("policy", {}) if suite is not None else {}
    return {
        "mandatory": sorted(given.get("mandatory", [])),
        "controls": sorted(given.get("controls", [])),
        "alpha": float(given.get("alpha", DEFAULT_ALPHA)),
    }


def suites_above(scenario_file: Path) -> Iterator[Suite]:
    """The suite files that apply to `scenario_file`, nearest first."""
    folder = scenario_file.resolve().parent
    while True:
        candidate = folder / SUITE_FILE
        if candidate.is_file():
            yield _read(candidate)
        if folder.parent == folder or any((folder / m).exists() for m in _ROOT_MARKERS):
            return
        folder = folder.parent
        if folder.name == "site-packages":  # installed suites take nothing from above
            return


def inherited(scenario_file: Path, data: dict[str, Any]) -> dict[str, Suite]:
    """Field -> the suite file it comes from, for every shared field `data` does not give."""
    found: dict[str, Suite] = {}
    for suite in suites_above(scenario_file):
        for key in suite.defaults:
            if key not in data and key not in found:
                found[key] = suite
    return found


def nearest(scenario_file: Path, key: str) -> Suite | None:
    """The nearest suite file above `scenario_file` that gives its own field `key`."""
    return next((s for s in suites_above(scenario_file) if key in s.own), None)


def own_suite(scenario_file: Path) -> tuple[str, dict[str, Any]]:
    """A user's scenario file's suite: its name (the nearest suite file's `name`, else that
    file's folder name, else the scenario's folder name) and its comparison policy."""
    named = nearest(scenario_file, "name")
    first = next(suites_above(scenario_file), None)
    if named is not None:
        name = str(named.own["name"])
    else:
        name = (first.path if first is not None else scenario_file.resolve()).parent.name
    return name, suite_policy(nearest(scenario_file, "policy"))


_REBOUND: dict[str, tuple[dict[str, str], Path]] = {}
"""alias -> (binding, folder its path is relative to), from `--dataset alias=kind:source`."""


_URL_PASSWORD = re.compile(r"^([a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s]*@")


def hide_password(url: str) -> str:
    """A DSN or database URL as messages, keys and folder names show it: no password."""
    return _URL_PASSWORD.sub(r"\1***@", redact(url, url))


def rebind(bindings: dict[str, dict[str, str]], base: Path) -> None:
    """Bind aliases for this process (paths relative to `base`), replacing suite files'."""
    _REBOUND.clear()
    _REBOUND.update({alias: (binding, base) for alias, binding in bindings.items()})


def rebound() -> dict[str, str]:
    """alias -> `kind:source` for every alias this process rebinds (for run.json; a path
    resolved, so the record does not depend on the folder the run started in)."""
    out = {}
    for alias, (binding, base) in sorted(_REBOUND.items()):
        ((kind, source),) = binding.items()
        if kind not in DSN_KINDS:
            source = str((base / Path(source).expanduser()).resolve())
        else:
            source = hide_password(source)
        out[alias] = f"{kind}:{source}"
    return out


def resolve_alias(scenario_file: Path, alias: str) -> tuple[dict[str, Any], Path] | None:
    """The binding `dataset: <alias>` names (a `--dataset` rebinding first, then the nearest
    suite file's `datasets`) and the folder its paths are relative to; None if unbound."""
    if alias in _REBOUND:
        binding, base = _REBOUND[alias]
        return {"world": alias, **binding}, base
    for suite in suites_above(scenario_file):
        datasets = suite.own.get("datasets") or {}
        if alias in datasets:
            return {"world": alias, **datasets[alias]}, suite.path.parent
    return None
