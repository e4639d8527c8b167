"""Suite files: `backintel-suite.yaml` gives the defaults of every scenario file in its folder
and below, so a folder of scenarios binds its dataset once.

```yaml
# scenarios/backintel-suite.yaml
dataset: {sqlite: ../shop.sqlite}   # relative to this file
split: development
```

A suite file may give `dataset`, `split`, `level` and `family` (`SHARED`). A scenario takes
each field it does not give itself from the nearest suite file above it (its own folder
first, then each parent up to the project root: the first folder holding `pyproject.toml` or
`.git`; an installed package's scenarios look no higher than their package); a field the
scenario gives wins whole (its own `dataset` replaces the suite's).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = ["SHARED", "SUITE_FILE", "Suite", "SuiteFileError", "inherited", "suites_above"]

SUITE_FILE = "backintel-suite.yaml"
SHARED = ("dataset", "split", "level", "family")
"""The scenario fields a suite file may give."""
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
            if key.value not in SHARED:
                problems.append(
                    (
                        key.start_mark.line + 1,
                        str(key.value),
                        f"unknown field; a suite file gives {', '.join(SHARED)}",
                    )
                )
        if problems:
            raise SuiteFileError(path, problems)
        data = yaml.safe_load(text)
        suite = Suite(path, dict(data), lines)
    _CACHE[path] = (stat.st_mtime_ns, stat.st_size, suite)
    return suite


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
