"""A model matrix in one session: `--model A --model B ...` (or a suite file's `models`).

One plan holds every trial once per model: the item `<case>[t<trial>-<model slug>]`, so the
models' trials of one case run one after another (an outage or a slow hour hits every model
alike) and ids stay sorted and the same in every xdist worker; a single model keeps its
`<case>[t<trial>]` ids. Stores are provisioned per trial as in any run (built datasets,
probes and the sandbox backend are shared by every model). Each model gets its own analyst; the
models at one provider (the same `--model-base-url`, else the same provider prefix) share one
`--max-connections` cap, and `--concurrency` trials run per provider.

The session's run folder is the matrix folder: its `run.json`, parts and `records.jsonl` hold
every model's trials, so `--resume`, `--retry-blocked`, `--shard` and `backintel merge` work on
it as on any run. When a session ends (and after a merge) `records.matrix_folder` writes a
normal run folder per model under it and `matrix.json` with the leaderboard.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_backintel.analyst_api import Analyst, AnalystConfig
from pytest_backintel.collect.items import model_slug
from pytest_backintel.options import BenchOptions, spec_kind
from pytest_backintel.records.matrix_folder import MATRIX_FILE
from pytest_backintel.records.method_hash import analyst_method_hash, model_api_of
from pytest_backintel.records.writer import read_json
from pytest_backintel.run.analysts import load_analyst
from pytest_backintel.run.suite_run import suite_analyst, suite_field
from pytest_backintel.scoring.judging import check_judge

__all__ = [
    "ModelMatrix",
    "analysts_of",
    "cassette_folder",
    "matrix_summary",
    "model_matrix",
    "models_of",
    "provider_of",
    "suite_models",
]


def provider_of(model: str, base_url: str | None) -> str:
    """What a model's requests share limits with: its server, else its provider prefix."""
    if base_url:
        return base_url.rstrip("/")
    prefix, colon, _ = model.partition(":")
    return prefix if colon else model


class ModelMatrix:
    """The models of a matrix session, each with its own options and (lazily) analyst."""

    def __init__(self, opts: BenchOptions) -> None:
        self.options = opts
        self.models = tuple(sorted(opts.models, key=model_slug))
        self.slugs = {m: model_slug(m) for m in self.models}
        clash = [m for m in self.models if list(self.slugs.values()).count(self.slugs[m]) > 1]
        if clash:
            raise pytest.UsageError(
                f"--model {' and '.join(repr(m) for m in clash)} have the same folder name "
                f"{self.slugs[clash[0]]!r}: a matrix needs models whose names differ in "
                "letters or digits"
            )
        if opts.freeze:
            raise pytest.UsageError(
                f"--freeze with {len(self.models)} models: a frozen run measures one candidate; "
                "freeze each model in a run of its own"
            )
        self._analysts: dict[str, Analyst] = {}
        self._lock = threading.Lock()

    @classmethod
    def of(cls, opts: BenchOptions) -> ModelMatrix | None:
        """The matrix of `opts` (None for one model or none), each model's judge checked."""
        for model in opts.models or (opts.model,):
            check_judge(opts.judge_model, model)
        return cls(opts) if opts.models else None

    def options_for(self, model: str) -> BenchOptions:
        """The options of a one-model run of `model` (its folder's `run.json` says these)."""
        return replace(self.options, model=model, models=())

    def config_for(self, model: str) -> AnalystConfig:
        opts = self.options
        group = provider_of(model, opts.model_base_url)
        return AnalystConfig(model, opts.model_base_url, opts.limits, opts.max_connections, group)

    def analyst(self, model: str | None) -> Analyst:
        """The analyst of `model` (the first model's for None), loaded once."""
        model = model or self.models[0]
        with self._lock:
            if model not in self._analysts:
                self._analysts[model] = load_analyst(
                    self.options.analyst,
                    self.config_for(model),
                    unsandboxed=self.options.analyst_unsandboxed,
                    cwd=self.options.analyst_dir,
                )
            return self._analysts[model]

    def analysts(self) -> list[tuple[str, Analyst]]:
        return [(m, self.analyst(m)) for m in self.models]

    @property
    def providers(self) -> int:
        return len({provider_of(m, self.options.model_base_url) for m in self.models})

    def header(self) -> dict[str, Any]:
        """`run.json`'s `matrix`: the models, their folders and each one's own settings."""
        return {
            "models": list(self.models),
            "folders": dict(self.slugs),
            "per_model": {
                m: {
                    "model": m,
                    "model_api": model_api_of(self.options_for(m)),
                    "method_hash": analyst_method_hash(self.options_for(m)),
                }
                for m in self.models
            },
        }


def analysts_of(session: Any) -> list[tuple[Analyst, BenchOptions]]:
    """Every analyst of the session with the options it runs under (one per model of a
    matrix); loading them raises `AnalystLoadError` for a bad analyst or model."""
    matrix: ModelMatrix | None = session.matrix
    if matrix is None:
        return [(session.analyst, session.options)]
    return [(analyst, matrix.options_for(model)) for model, analyst in matrix.analysts()]


def cassette_folder(session: Any, item: Any) -> Path:
    """Where a trial's cassette goes: the run folder, or in a matrix its model's folder."""
    matrix: ModelMatrix | None = session.matrix
    run_dir: Path = session.run_dir
    return run_dir if matrix is None or item.model is None else run_dir / matrix.slugs[item.model]


def model_matrix(given: list[str] | None, suite_models: list[str] | None) -> list[str]:
    """The models `--model` names (each once, in the order given), else a suite file's
    `models`; a model named twice is a usage error."""
    models = [m.strip() for m in (given or suite_models or [])]
    if any(not m for m in models):
        raise pytest.UsageError("--model '': give a model string, e.g. openai:gpt-5.1")
    if twice := sorted({m for m in models if models.count(m) > 1}):
        raise pytest.UsageError(
            f"--model {twice[0]!r} is given twice: a model matrix names each model once"
        )
    return models


def models_of(config: pytest.Config) -> list[str]:
    """The models this run measures: `--model` (each once), else the suite file's (not for a
    calibration or replay run, which calls no model)."""
    explicit = config.getoption("--analyst") or (a[0] if (a := suite_analyst(config)) else None)
    calls_no_model = explicit and spec_kind(explicit) in ("calibration", "replay")
    return model_matrix(
        config.getoption("--model"), None if calls_no_model else suite_models(config)
    )


def suite_models(config: pytest.Config) -> list[str] | None:
    """The `models` of the suite file nearest above the folders the run names (its arguments,
    else where it started), when `--model` is not given; None when no suite file gives them."""
    if config.getoption("--model"):
        return None
    got = suite_field(config, "models")
    return list(got[0]) if got else None


def matrix_summary(session: Any) -> list[str]:
    """The terminal's leaderboard of a matrix session that wrote one ([] otherwise)."""
    if session.matrix is None or not session.records:
        return []
    from pytest_backintel.records.leaderboard import leaderboard_lines  # numpy: on use

    return leaderboard_lines(read_json(session.run_dir / MATRIX_FILE).get("leaderboard", []))
