"""Resolve `--analyst` to an analyst: the harness reaches analysts only through this factory."""

from __future__ import annotations

import importlib

from pytest_backintel.analyst_api import Analyst, AnalystConfig
from pytest_backintel.options import CALIBRATION_ANALYSTS

__all__ = ["AnalystLoadError", "load_analyst"]

_BUILTIN = {name: f"analyst.calibration:{name.replace('-', '_')}" for name in CALIBRATION_ANALYSTS}
_BUILTIN["model"] = "analyst.models:model_analyst"


class AnalystLoadError(Exception):
    """`--analyst` named something that could not be loaded or is not an analyst."""


def load_analyst(spec: str, config: AnalystConfig) -> Analyst:
    """Import `pkg.module:callable` (or a built-in name), call it with `config`, check it."""
    target = _BUILTIN.get(spec, spec)
    module_name, _, attr = target.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise AnalystLoadError(f"--analyst {spec!r}: cannot load {target!r}: {exc}") from exc
    analyst = factory(config)
    if not isinstance(analyst, Analyst):
        raise AnalystLoadError(
            f"--analyst {spec!r}: {target} returned {type(analyst).__name__}, which lacks "
            "`name`, `kind` and `answer(task)`"
        )
    return analyst
