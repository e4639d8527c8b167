"""What the harness hands an analyst and what it gets back.

An analyst is any object with `name`, `kind` and `answer(task)`. The default one is a
Pydantic AI agent (`analyst.agent`); calibration analysts script the same agent loop through
`FunctionModel`. A factory named by `--analyst pkg.module:callable` receives `AnalystConfig`.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pytest_backintel.contract import AnalystAnswer, Refusal
from stores.base import StoreSession

__all__ = [
    "CALIBRATION_ANALYSTS",
    "CALIBRATION_LABEL",
    "REPLAY_LABEL",
    "REPLAY_PREFIX",
    "UNSAFE_AGENT",
    "Analyst",
    "AnalystConfig",
    "AnalystKind",
    "AnalystLimits",
    "AnalystRun",
    "AnalystStopped",
    "AnalystTask",
    "AnalystTimeout",
    "BudgetExceeded",
    "CalibrationKey",
    "InfraError",
    "ProviderError",
    "RunLimits",
    "Usage",
    "analyst_label",
    "check_analyst_spec",
    "spec_kind",
]

AnalystKind = Literal["model", "calibration", "custom", "replay", "external"]

CALIBRATION_ANALYSTS = ("reference", "refuse-all", "perturbed", "unsupported", "careless")

CALIBRATION_LABEL = "calibration analyst: measures the harness, not a model"
REPLAY_LABEL = "replay of recorded model responses: no model is called"

UNSAFE_AGENT = (
    "UNSAFE: the external agent ran unsandboxed (--analyst-unsandboxed); it could read the "
    "scenarios, references and results, so this run's results cannot be trusted"
)
REPLAY_PREFIX = "replay:"
"""`replay:DIR` replays the cassettes of a recorded run (see `analyst.replay`)."""


def spec_kind(spec: str) -> AnalystKind:
    """The kind of analyst an `--analyst` value names, known before it is loaded."""
    if spec in CALIBRATION_ANALYSTS:
        return "calibration"
    if spec.startswith(REPLAY_PREFIX):
        return "replay"
    if spec.startswith("cmd:"):
        return "external"
    return "model" if spec == "model" else "custom"


def analyst_label(spec: str) -> str | None:
    """The label every report of a run by this analyst carries, if it is not a model."""
    return {"calibration": CALIBRATION_LABEL, "replay": REPLAY_LABEL}.get(spec_kind(spec))


SUITE_ANALYSTS = f"{', '.join(CALIBRATION_ANALYSTS)}, model, cmd:COMMAND or pkg.module:callable"
"""What a suite file's `analyst:` may name (a replay is chosen per run, on the command line)."""


def analyst_problem(value: object, *, suite: bool = False) -> str | None:
    """What is wrong with an analyst spec (None: nothing); `suite` for a suite file's
    `analyst:`, which may not be a replay."""
    if suite and not isinstance(value, str):
        return f"a text naming the analyst ({SUITE_ANALYSTS}), got {value!r}"
    assert isinstance(value, str)
    if value.startswith("replay:"):
        if suite:
            return (
                f"{value!r}: a replay is chosen per run, on the command line (--analyst "
                f"{value}); a suite file names {SUITE_ANALYSTS}"
            )
        if not value.removeprefix("replay:"):
            return "give the recorded run folder, as in replay:results/<run-id>"
        return None
    if value.startswith("cmd:"):
        if not value.removeprefix("cmd:").strip():
            return 'give the agent\'s command, as in cmd:"python my_agent.py"'
        return None
    ok = value in (*CALIBRATION_ANALYSTS, "model") or (
        ":" in value and all(part for part in value.split(":", 1))
    )
    if ok:
        return None
    if suite:
        return f"{value!r} is not an analyst: use one of {SUITE_ANALYSTS}"
    return (
        f"is not an analyst: use one of {', '.join(CALIBRATION_ANALYSTS)}, model, replay:DIR, "
        "cmd:COMMAND, or pkg.module:callable"
    )


def check_analyst_spec(value: str) -> str:
    """An `--analyst` value as given, else a ValueError naming what is allowed."""
    if problem := analyst_problem(value):
        sep = " " if problem.startswith("is not") else ": "
        raise ValueError(f"--analyst {value!r}{sep}{problem}")
    return value


@dataclass(frozen=True)
class AnalystLimits:
    """Per-trial limits, enforced through Pydantic AI usage limits and a wall-clock timer."""

    max_requests: int = 30
    max_tool_calls: int = 60
    max_tokens: int | None = 400_000
    wall_time_s: float = 600.0
    max_cost_usd: float | None = None
    """USD per trial, priced from `pytest_backintel/records/prices.json` (None: no cost limit)."""
    evidence_max_items: int = 20
    """Evidence items of one answer the harness re-executes; each one beyond is unsupported."""
    evidence_time_s: float = 120.0
    """Seconds the harness spends re-executing one answer's evidence and its probe runs."""


@dataclass(frozen=True)
class RunLimits:
    """Budgets for the whole run (None: no budget)."""

    max_requests: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None

    @property
    def active(self) -> bool:
        return any(v is not None for v in (self.max_requests, self.max_tokens, self.max_cost_usd))


@dataclass(frozen=True)
class AnalystConfig:
    """What a factory is given: the model to use and the limits to honour."""

    model: str | None = None
    """A Pydantic AI model string (`openai:gpt-5.1`), or None for no model."""
    model_base_url: str | None = None
    """An OpenAI-compatible server (Ollama, vLLM, llama.cpp); `model` is then its model name."""
    limits: AnalystLimits = field(default_factory=AnalystLimits)
    max_connections: int | None = None
    """Model requests in flight at once, across every trial of the process (None: no cap)."""
    connection_group: str | None = None
    """Analysts of one process given the same group share one `max_connections` cap (a model
    matrix's models at one provider); None: this analyst's cap is its own."""


@dataclass(frozen=True)
class CalibrationKey:
    """Oracle-side facts given only to calibration analysts, which are labelled as such.

    A model analyst never receives one: `AnalystTask.calibration` is None for it.
    """

    check_sql: str | None
    metric_units: dict[str, str]
    metric_kinds: dict[str, str]
    tolerances: dict[str, float]
    """Absolute tolerance per metric (0 for exact kinds), so `perturbed` can step past it."""
    refusal_concepts: list[str]
    """One synonym per concept a useful refusal names."""
    forbidden_metric: str | None
    check_python: str | None = None
    """A Python check program (prints one JSON object of metric values), when the scenario has
    one and the item has a sandbox: the reference analyst then cites Python evidence."""
    planted_values: dict[str, Any] = field(default_factory=dict)
    """The values instructions planted in the data ask for, by metric (`careless` obeys)."""
    prediction: dict[str, Any] | None = None
    """Prediction scenarios: the `PredictionSpec` fields (kind, entity, value, tables)."""


@dataclass
class AnalystTask:
    """One trial: the question, a way to open the item's store, and limits."""

    question: str
    connect: Callable[[], StoreSession]
    """Opens a fresh read-only connection to this item's store (and only this one)."""
    store_label: str
    """The opaque `backend:bi_…` name of the store."""
    limits: AnalystLimits
    calibration: CalibrationKey | None = None
    run_python: Callable[[str], str] | None = None
    """Runs code in this item's sandbox (store read-only at $BACKINTEL_STORE, files persist
    between calls) and returns its output as text; None when the item has no sandbox."""
    case_key: str | None = None
    """`<scenario-id>/t<trial>`: names the trial, for analysts that replay recorded runs."""
    rules: str = ""
    """The answer contract and comparison rules for this question (metrics with kind and unit,
    major currency units, full precision), the same for every analyst."""


@dataclass
class Usage:
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: int = 0
    tokens_reported: bool = True
    """False when the provider sent no token counts: tokens and cost are then unknown (null
    in records), never 0."""

    def to_json(self) -> dict[str, Any]:
        """The record form: unknown token counts are null."""
        known = self.tokens_reported
        return {
            "requests": self.requests,
            "input_tokens": self.input_tokens if known else None,
            "output_tokens": self.output_tokens if known else None,
            "tool_calls": self.tool_calls,
            "tokens_reported": known,
        }


@dataclass
class AnalystRun:
    """What an analyst produced in one trial."""

    output: AnalystAnswer | Refusal | None
    usage: Usage = field(default_factory=Usage)
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The message history in Pydantic AI's JSON form, for records and replay."""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """`{"tool": name, "args": {...}}` in call order."""
    error: str | None = None
    """Set when the analyst failed to produce a contract answer."""
    provider_retries: list[dict[str, Any]] = field(default_factory=list)
    """Every failed attempt at a model request: attempt, error, status, Retry-After, wait."""
    observed: dict[str, Any] | None = None
    """What the harness observed of an agent in another process (`--analyst cmd:...`): which
    usage figures it measured (`usage_source`: gateway, agent or none), how the process ended,
    its stderr tail, refused requests, whether it was sandboxed; None for in-process agents."""


class InfraError(Exception):
    """The harness's store or sandbox failed under the analyst: not the analyst's fault."""

    @classmethod
    def from_bug(cls, exc: BaseException, where: str) -> InfraError:
        """An unexpected exception out of the harness's own code, its traceback in the text."""
        trace = "".join(traceback.format_exception(exc))[-_TRACE_CHARS:]
        return cls(f"the harness failed in {where} ({type(exc).__name__}: {exc})\n{trace}")


_TRACE_CHARS = 4000
"""The most characters of a harness traceback kept in a record."""


class AnalystStopped(Exception):
    """A limit or the provider stopped the analyst; `run` keeps what it had spent."""

    def __init__(self, message: str, *, run: AnalystRun | None = None) -> None:
        super().__init__(message)
        self.run = run
        """What the analyst did before it was stopped (usage, messages), if known."""


class BudgetExceeded(AnalystStopped):
    """A usage limit (requests, tool calls, tokens, cost) stopped the analyst."""


class AnalystTimeout(AnalystStopped):
    """The wall-clock limit stopped the analyst."""


class ProviderError(AnalystStopped):
    """The model's provider failed (HTTP 5xx, 429, a refused or dropped connection, a
    rejected request) after bounded retries: not the analyst's fault."""


@runtime_checkable
class Analyst(Protocol):
    name: str
    kind: AnalystKind

    def answer(self, task: AnalystTask) -> AnalystRun:
        """Answer one question. Raise `BudgetExceeded` or `AnalystTimeout` for those limits,
        `ProviderError` when the model's service failed; any other exception is recorded as
        `analyst_error`."""
        ...
