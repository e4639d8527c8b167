"""Resolve `--analyst` to an analyst: the harness reaches analysts only through this factory."""

from __future__ import annotations

import importlib
from pathlib import Path

from pytest_backintel.analyst_api import Analyst, AnalystConfig
from pytest_backintel.options import CALIBRATION_ANALYSTS, REPLAY_PREFIX
from pytest_backintel.run.external.command import CMD_PREFIX, AgentCommandError

__all__ = ["AnalystLoadError", "load_analyst"]

_BUILTIN = {name: f"analyst.calibration:{name.replace('-', '_')}" for name in CALIBRATION_ANALYSTS}
_BUILTIN["careless"] = "analyst.careless:careless"
_BUILTIN["model"] = "analyst.models:model_analyst"


class AnalystLoadError(Exception):
    """`--analyst` named something that could not be loaded or is not an analyst."""


def load_analyst(
    spec: str, config: AnalystConfig, *, unsandboxed: bool = False, cwd: Path | None = None
) -> Analyst:
    """Import `pkg.module:callable` (or a built-in name), call it with `config`, check it;
    `cmd:COMMAND` is an agent in its own process (`run/external`), sandboxed unless
    `unsandboxed`."""
    if spec.startswith(CMD_PREFIX):
        try:
            # the MCP server and the analyst's tools: imported only for a `cmd:` agent
            from pytest_backintel.run.external.agent import external_analyst

            return external_analyst(spec, config, unsandboxed=unsandboxed, cwd=cwd)
        except AgentCommandError as exc:
            raise AnalystLoadError(str(exc)) from exc
    replay = spec.startswith(REPLAY_PREFIX)
    target = "analyst.replay:replay_analyst" if replay else _BUILTIN.get(spec, spec)
    module_name, _, attr = target.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise AnalystLoadError(f"--analyst {spec!r}: cannot load {target!r}: {exc}") from exc
    if not replay:
        try:
            analyst = factory(config)
        except Exception as exc:  # a bad model name or a factory that fails: said plainly
            where = f"--model {config.model}" if spec == "model" else f"--analyst {spec!r}"
            raise AnalystLoadError(f"backintel: {where}: {exc}") from exc
    else:
        try:
            analyst = factory(config, spec.removeprefix(REPLAY_PREFIX))
        except Exception as exc:  # no such folder, no cassettes: a usage error, said plainly
            raise AnalystLoadError(f"--analyst {spec!r}: {exc}") from exc
    if not isinstance(analyst, Analyst):
        raise AnalystLoadError(
            f"--analyst {spec!r}: {target} returned {type(analyst).__name__}, which lacks "
            "`name`, `kind` and `answer(task)`"
        )
    if analyst.kind == "calibration" and spec not in CALIBRATION_ANALYSTS:
        raise AnalystLoadError(
            f"--analyst {spec!r}: the analyst declares kind 'calibration', but only the built-in "
            f"calibration analysts ({', '.join(CALIBRATION_ANALYSTS)}) receive calibration "
            "facts; declare kind 'custom' (or 'model')"
        )
    return analyst
