"""Resolve `--analyst` to an analyst: the harness reaches analysts only through this factory."""

from __future__ import annotations

import importlib

from pytest_backintel.analyst_api import Analyst, AnalystConfig
from pytest_backintel.options import CALIBRATION_ANALYSTS, REPLAY_PREFIX

__all__ = ["AnalystLoadError", "load_analyst"]

_BUILTIN = {name: f"analyst.calibration:{name.replace('-', '_')}" for name in CALIBRATION_ANALYSTS}
_BUILTIN["careless"] = "analyst.careless:careless"
_BUILTIN["model"] = "analyst.models:model_analyst"


class AnalystLoadError(Exception):
    """`--analyst` named something that could not be loaded or is not an analyst."""


def load_analyst(spec: str, config: AnalystConfig) -> Analyst:
    """Import `pkg.module:callable` (or a built-in name), call it with `config`, check it."""
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
