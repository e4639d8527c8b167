"""What a suite file chooses for the run of its folder: `models` (a model matrix, see
`pytest_backintel.run.matrix`) and `analyst`, each only when the command line does not.

The suite file read is the nearest one above each folder or file the run names (its
arguments, else the folder it started in) that gives the field; two that give different
values are a usage error (an invalid suite file is left to collection, which names it at its
line, and nothing runs). A suite file's `analyst: cmd:...` resolves its paths in the suite
file's folder (`BenchOptions.analyst_dir`); `--analyst-unsandboxed` is the command line's
choice alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_backintel.collect.suites import Suite, SuiteFileError, nearest

__all__ = ["suite_analyst", "suite_field"]


def suite_field(config: pytest.Config, key: str) -> tuple[Any, Suite] | None:
    """The value of the suite files' own field `key` for this run and the suite file giving
    it; None when no suite file above the run's folders gives it."""
    base = config.invocation_params.dir
    starts = [base / str(arg).split("::", 1)[0] for arg in config.args] or [base]
    found: dict[str, tuple[Any, Suite]] = {}
    for start in starts:
        folder = start if start.is_dir() else start.parent
        try:
            suite = nearest(folder / "_", key) if folder.is_dir() else None
        except SuiteFileError:  # a bad suite file: collection names it at its line, and
            continue  # nothing runs (`validate` names it too)
        if suite is not None:
            found.setdefault(repr(suite.own[key]), (suite.own[key], suite))
    if len(found) > 1:
        places = ", ".join(f"{suite.path} ({value!r})" for value, suite in found.values())
        raise pytest.UsageError(
            f"the suite files of this run give different {key}: {places}; run them apart, "
            f"or choose with --{key.removesuffix('s')}"
        )
    return next(iter(found.values())) if found else None


def suite_analyst(config: pytest.Config) -> tuple[str, Path, int] | None:
    """The suite file's `analyst:` (the spec, the file, its line) when `--analyst` is not
    given; None otherwise."""
    if config.getoption("--analyst"):
        return None
    got = suite_field(config, "analyst")
    if got is None:
        return None
    spec, suite = got
    return str(spec), suite.path, suite.lines.get("analyst", 1)
