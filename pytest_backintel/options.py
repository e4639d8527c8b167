"""Command-line options, one group, each parsed by a typed function with a quoted error."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from pytest_backintel.analyst_api import (
    CALIBRATION_ANALYSTS,
    CALIBRATION_LABEL,
    REPLAY_LABEL,
    REPLAY_PREFIX,
    AnalystLimits,
    RunLimits,
    analyst_label,
    check_analyst_spec,
    spec_kind,
)
from pytest_backintel.sandbox.registry import default_sandbox
from pytest_backintel.scenario import parse_rebinding, rebinding

__all__ = [
    "CALIBRATION_ANALYSTS",
    "CALIBRATION_LABEL",
    "REPLAY_LABEL",
    "REPLAY_PREFIX",
    "BenchOptions",
    "RunLimits",
    "add_options",
    "analyst_label",
    "parse_rebinding",
    "read_options",
    "spec_kind",
]

N = TypeVar("N", int, float)


@dataclass(frozen=True)
class BenchOptions:
    analyst: str
    """`reference`, `refuse-all`, `perturbed`, `unsupported`, `careless`, `model`, or
    `pkg.module:callable`."""
    model: str | None
    model_base_url: str | None
    store: str
    trials: int
    results_dir: Path
    run_id: str | None
    limits: AnalystLimits
    freeze: bool
    sandbox: str
    freeze_plan: str | None
    run_limits: RunLimits = field(default_factory=RunLimits)
    """Budgets for the whole run (`--run-max-requests`, `--run-max-tokens`, `--run-max-cost`)."""
    record: bool = False
    """`--record`: keep each trial's message history as a cassette for `replay:DIR`."""
    judge_model: str | None = None
    """`--judge-model`: scores the narrative separately, uncalibrated; never the outcome."""
    concurrency: int | None = None
    """`--concurrency`: trials in flight per process (None: `auto`, chosen by analyst kind)."""
    max_connections: int | None = None
    """`--max-connections`: the model analyst's requests in flight at once per process."""
    freeze_baseline: str | None = None
    """`--freeze-baseline`: the commit a frozen candidate's diff is checked against (default:
    the last frozen run's commit)."""
    max_provider_failures: int = 3
    """`--max-provider-failures`: after this many `provider_error` trials in a row, the
    remaining items end as `not_run`."""
    append_run: bool = False
    """`--append-run`: add to an existing `--run-id` folder that already holds records."""
    resume: str | None = None
    """`--resume RUN_ID` or `--retry-blocked RUN_ID`: the run this session finishes."""
    retry_blocked: bool = False
    """`--retry-blocked`: also run again the trials whose final outcome was blocked."""
    shard: tuple[int, int] | None = None
    """`--shard I/N`: this process runs part I (1-based) of N of the planned trials."""
    shard_durations: Path | None = None
    """`--shard-durations RUN_DIR`: balance the shards by that run's recorded latencies."""
    analyst_unsandboxed: bool = False
    """A `cmd:` agent runs outside the sandbox (unsafe: every record says so)."""
    models: tuple[str, ...] = ()
    """`--model A --model B ...`: a model matrix (two or more models; `model` is then None),
    every trial of the plan run once per model (see `pytest_backintel.run.matrix`)."""
    analyst_from: tuple[Path, int] | None = None
    """The suite file (and line) whose `analyst:` this is, when `--analyst` was not given: a
    `cmd:` agent's paths are relative to that file's folder."""

    @property
    def analyst_dir(self) -> Path | None:
        """The folder a `cmd:` analyst's paths resolve in (None: the run's working directory)."""
        return self.analyst_from[0].parent if self.analyst_from else None


def _number(value: str, parse: Callable[[str], N], ok: Callable[[N], bool], expected: str) -> N:
    """`value` parsed by `parse` and accepted by `ok`, else a UsageError naming `expected`."""
    try:
        number: N | None = parse(value)
    except ValueError:
        number = None
    if number is None or not ok(number):
        raise pytest.UsageError(f"expected {expected}, got {value!r}")
    return number


def positive_int(value: str) -> int:
    return _number(value, int, lambda n: n >= 1, "a whole number of at least 1")


def positive_float(value: str) -> float:
    return _number(value, float, lambda n: n > 0, "a positive number of seconds")


def positive_usd(value: str) -> float:
    return _number(value, float, lambda n: 0 < n < float("inf"), "a positive amount of USD")


def concurrency(value: str) -> int | None:
    if value == "auto":
        return None
    return _number(value, int, lambda n: 1 <= n <= 256, "'auto' or a whole number from 1 to 256")


def shard_spec(value: str) -> tuple[int, int]:
    """`I/N` with 1 <= I <= N, e.g. `2/8` (a CI matrix index, a Kubernetes completion index
    plus one)."""
    index, _, total = value.partition("/")
    if not (index.isdigit() and total.isdigit() and 1 <= int(index) <= int(total)):
        raise pytest.UsageError(
            f"--shard {value!r}: expected I/N with whole numbers 1 <= I <= N, as in 2/8"
        )
    return int(index), int(total)


def analyst_spec(value: str) -> str:
    """An `--analyst` value (`check_analyst_spec`), else a UsageError saying what is allowed."""
    try:
        return check_analyst_spec(value)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from exc


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("backintel", "BackIntel Bench: measure data-analyst agents")
    group.addoption(
        "--analyst",
        type=analyst_spec,
        default=None,
        help="analyst under test: reference (default without a model), refuse-all, "
        "perturbed, unsupported, careless, model, replay:DIR (a run recorded with --record), "
        'cmd:"COMMAND" (an agent in its own sandboxed process, using the trial\'s MCP tools), '
        "or pkg.module:callable",
    )
    group.addoption(
        "--analyst-unsandboxed",
        action="store_true",
        default=False,
        help="run a cmd: agent outside the sandbox: UNSAFE, it can read the scenarios, "
        "references and results; every record says so",
    )
    group.addoption(
        "--model",
        action="append",
        default=None,
        help="Pydantic AI model string (e.g. openai:gpt-5.1); default: $BACKINTEL_MODEL; "
        "given twice or more, a model matrix: every trial once per model, one run folder each",
    )
    group.addoption(
        "--model-base-url",
        default=None,
        help="OpenAI-compatible server URL (Ollama, vLLM, llama.cpp)",
    )
    group.addoption("--store", default="sqlite", help="store backend for every scenario")
    group.addoption(
        "--dataset",
        type=rebinding,
        action="append",
        default=[],
        metavar="ALIAS=KIND:SOURCE",
        help="rebind a dataset alias of the suite files for this run (recorded in run.json), "
        "e.g. shop=postgres:SHOP_DSN or shop=parquet:exports/",
    )
    group.addoption(
        "--sandbox",
        default=None,
        help="sandbox for run_python and Python evidence: bwrap (default on Linux), docker, "
        "or subprocess (unsafe: rlimits only)",
    )
    group.addoption(
        "--trials",
        type=lambda v: v if v.startswith("auto:") else positive_int(v),
        default=1,
        help="trials per scenario, or auto:EFFECT:BASELINE_RUN: as many as a paired comparison "
        "with that baseline run needs to detect EFFECT (80%% power, alpha 0.05; backintel plan)",
    )
    group.addoption(
        "--concurrency",
        type=concurrency,
        default=None,
        metavar="N",
        help="trials in flight per process, each reported as its own item in order "
        "(default auto: 4 for a model analyst or an external agent, 2 for a calibration "
        "analyst on two or more cores, one of them while a world is built ahead; 1 otherwise)",
    )
    group.addoption(
        "--max-connections",
        type=positive_int,
        default=None,
        metavar="N",
        help="model requests in flight at once per process, across its trials (default: no "
        "cap); more trials than connections keep every connection busy",
    )
    group.addoption("--results-dir", default="results", help="where run folders are written")
    group.addoption(
        "--run-id",
        default=None,
        help="name of this run's folder (default: generated); one that already holds records "
        "is refused unless --append-run",
    )
    group.addoption(
        "--append-run",
        action="store_true",
        default=False,
        help="add this run's trials to the existing --run-id folder (recorded in run.json)",
    )
    group.addoption(
        "--resume",
        default=None,
        metavar="RUN_ID",
        help="finish the interrupted run RUN_ID: run its planned trials that have no record, "
        "with the same plan, analyst, model settings, scenarios and data (refused otherwise)",
    )
    group.addoption(
        "--retry-blocked",
        default=None,
        metavar="RUN_ID",
        help="as --resume, and also run again the trials of RUN_ID that ended provider_error, "
        "infra_error or not_run (the earlier attempt stays in the record)",
    )
    group.addoption(
        "--shard",
        type=shard_spec,
        default=None,
        metavar="I/N",
        help="run part I of N of the planned trials (deterministic and balanced; merge the "
        "parts with `backintel merge`)",
    )
    group.addoption(
        "--shard-durations",
        default=None,
        metavar="RUN_DIR",
        help="balance --shard parts by the trial latencies recorded in this earlier run",
    )
    group.addoption(
        "--max-provider-failures",
        type=positive_int,
        default=3,
        help="stop the run (remaining items not_run) after this many consecutive "
        "provider_error trials",
    )
    group.addoption("--max-requests", type=positive_int, default=30, help="requests per trial")
    group.addoption("--max-tool-calls", type=positive_int, default=60, help="tool calls per trial")
    group.addoption("--max-tokens", type=positive_int, default=400_000, help="tokens per trial")
    group.addoption(
        "--analyst-timeout", type=positive_float, default=600.0, help="wall-clock seconds per trial"
    )
    group.addoption("--max-cost", type=positive_usd, default=None, help="USD per trial")
    group.addoption(
        "--evidence-max-items",
        type=positive_int,
        default=20,
        help="evidence items re-executed per answer; each one beyond is unsupported_evidence",
    )
    group.addoption(
        "--evidence-timeout",
        type=positive_float,
        default=120.0,
        help="seconds of evidence re-execution (items and probe runs) per answer; no run "
        "starts after, and what is left is unsupported_evidence",
    )
    group.addoption("--run-max-requests", type=positive_int, default=None, help="requests per run")
    group.addoption("--run-max-tokens", type=positive_int, default=None, help="tokens per run")
    group.addoption("--run-max-cost", type=positive_usd, default=None, help="USD per run")
    group.addoption(
        "--record",
        action="store_true",
        default=False,
        help="store each trial's message history in <run>/cassettes for --analyst replay:DIR",
    )
    group.addoption(
        "--freeze",
        action="store_true",
        default=False,
        help="frozen acceptance run (required for the reserved split)",
    )
    group.addoption(
        "--judge-model",
        default=None,
        help="model (of another family than the analyst's) that scores the narrative of each "
        "answer; its scores are labelled uncalibrated and never decide correctness",
    )
    group.addoption(
        "--freeze-plan",
        default=None,
        help="declared plan for a further frozen run of the same candidate",
    )
    group.addoption(
        "--freeze-baseline",
        default=None,
        help="commit the candidate's diff is checked against the worker allowlist from "
        "(default: the last frozen run's commit; the evaluator's own changes are declared here)",
    )
    parser.addini(
        "backintel_manifests",
        type="linelist",
        default=[],
        help="globs (relative to rootdir) of acceptance/regression manifests",
    )


def read_options(
    config: pytest.Config,
    models: list[str] | None = None,
    trials: Callable[[int | str], int] = int,
    suite_analyst: tuple[str, Path, int] | None = None,
) -> BenchOptions:
    """The options; `models` are the checked `--model` values, or a suite file's models
    (`pytest_backintel.run.matrix.models_of`); None reads `--model` as given; `trials` turns
    `--trials` (a number, or `auto:EFFECT:BASELINE`) into a count; `suite_analyst` is a
    suite file's `analyst:` (spec, file, line), used when `--analyst` is not given."""
    explicit = config.getoption("--analyst")
    suite = None if explicit or suite_analyst is None else suite_analyst
    explicit = explicit or (suite[0] if suite else None)
    models = list(config.getoption("--model") or []) if models is None else models
    model = models[0] if len(models) == 1 else None
    if not models:
        model = os.environ.get("BACKINTEL_MODEL") or None
    base_url = config.getoption("--model-base-url") or os.environ.get("BACKINTEL_MODEL_BASE_URL")
    analyst = explicit or ("model" if model or models else "reference")
    resume, retry = config.getoption("--resume"), config.getoption("--retry-blocked")
    if analyst == "model" and not (model or models):
        raise pytest.UsageError("--analyst model needs --model or BACKINTEL_MODEL")
    if len(models) > 1 and spec_kind(analyst) in ("calibration", "replay"):
        raise pytest.UsageError(
            f"--model given {len(models)} times with --analyst {analyst}: a model matrix "
            "measures a model analyst (--analyst model, the default) or one of your own"
        )
    return BenchOptions(
        analyst=analyst,
        models=tuple(models) if len(models) > 1 else (),
        model=model,
        model_base_url=base_url or None,
        store=config.getoption("--store"),
        trials=trials(config.getoption("--trials")),
        concurrency=config.getoption("--concurrency"),
        max_connections=config.getoption("--max-connections"),
        results_dir=Path(config.getoption("--results-dir")),
        run_id=resume or retry or config.getoption("--run-id"),
        limits=AnalystLimits(
            max_requests=config.getoption("--max-requests"),
            max_tool_calls=config.getoption("--max-tool-calls"),
            max_tokens=config.getoption("--max-tokens"),
            wall_time_s=config.getoption("--analyst-timeout"),
            max_cost_usd=config.getoption("--max-cost"),
            evidence_max_items=config.getoption("--evidence-max-items"),
            evidence_time_s=config.getoption("--evidence-timeout"),
        ),
        freeze=config.getoption("--freeze"),
        sandbox=config.getoption("--sandbox") or default_sandbox(),
        freeze_plan=config.getoption("--freeze-plan"),
        judge_model=config.getoption("--judge-model") or os.environ.get("BACKINTEL_JUDGE_MODEL"),
        run_limits=RunLimits(
            max_requests=config.getoption("--run-max-requests"),
            max_tokens=config.getoption("--run-max-tokens"),
            max_cost_usd=config.getoption("--run-max-cost"),
        ),
        record=config.getoption("--record"),
        freeze_baseline=config.getoption("--freeze-baseline"),
        max_provider_failures=config.getoption("--max-provider-failures"),
        append_run=config.getoption("--append-run"),
        resume=resume or retry,
        retry_blocked=bool(retry),
        shard=config.getoption("--shard"),
        shard_durations=Path(d) if (d := config.getoption("--shard-durations")) else None,
        analyst_unsandboxed=config.getoption("--analyst-unsandboxed"),
        analyst_from=(suite[1], suite[2]) if suite else None,
    )
