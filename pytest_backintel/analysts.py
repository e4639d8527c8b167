"""Resolve `--analyst` to an analyst: the harness reaches analysts only through this factory."""

from __future__ import annotations

import importlib

from pytest_backintel.analyst_api import Analyst, AnalystConfig, AnalystKind
from pytest_backintel.options import CALIBRATION_ANALYSTS

__all__ = [
    "CALIBRATION_LABEL",
    "REPLAY_LABEL",
    "REPLAY_PREFIX",
    "AnalystLoadError",
    "analyst_label",
    "load_analyst",
    "spec_kind",
]

CALIBRATION_LABEL = "calibration analyst: measures the harness, not a model"
REPLAY_LABEL = "replay of recorded model responses: no model is called"

_BUILTIN = {name: f"analyst.calibration:{name.replace('-', '_')}" for name in CALIBRATION_ANALYSTS}
_BUILTIN["model"] = "analyst.models:model_analyst"
REPLAY_PREFIX = "replay:"
"""`replay:DIR` replays the cassettes of a recorded run (see `analyst.replay`)."""


def spec_kind(spec: str) -> AnalystKind:
    """The kind of analyst an `--analyst` value names, known before it is loaded."""
    if spec in CALIBRATION_ANALYSTS:
        return "calibration"
    if spec.startswith(REPLAY_PREFIX):
        return "replay"
    return "model" if spec == "model" else "custom"


def analyst_label(spec: str) -> str | None:
    """The label every report of a run by this analyst carries, if it is not a model."""
    return {"calibration": CALIBRATION_LABEL, "replay": REPLAY_LABEL}.get(spec_kind(spec))


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
