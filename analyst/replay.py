"""The replay analyst: re-runs recorded trials offline through `FunctionModel`.

`--analyst replay:DIR` (DIR a run folder recorded with `--record`, or its `cassettes`
folder) finds each trial's cassette by `task.case_key` and hands the agent the recorded model
responses in order. The agent and its tools are the real ones, so every tool call runs again
against the item's fresh store and the answer is re-scored from scratch; only the model is
replaced. No model provider is called. The agent must be the default one (`build_agent`):
cassettes of agents with other tools do not replay.
"""

from __future__ import annotations

from pathlib import Path

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from analyst.agent import build_agent, run_agent
from analyst.tools import AnalystDeps
from pytest_backintel.analyst_api import AnalystConfig, AnalystKind, AnalystRun, AnalystTask
from pytest_backintel.records.cassettes import CassetteError, find_cassette_dir, read_cassette

__all__ = ["ReplayAnalyst", "ReplayError", "recorded_responses", "replay_analyst"]

REPLAY_MODEL_NAME = "replay"


class ReplayError(RuntimeError):
    """A recorded trial cannot be replayed (no case key, no cassette, cassette exhausted)."""


def recorded_responses(cassettes: Path, key: str) -> list[ModelResponse]:
    """The model responses of the trial `key`, in the order they were received."""
    try:
        messages = ModelMessagesTypeAdapter.validate_python(read_cassette(cassettes, key))
    except CassetteError as exc:
        raise ReplayError(str(exc)) from exc
    return [m for m in messages if isinstance(m, ModelResponse)]


class _Player:
    """The `FunctionModel` function: the next recorded response on each request."""

    def __init__(self, key: str, responses: list[ModelResponse]) -> None:
        self.key = key
        self.responses = responses
        self.played = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if self.played >= len(self.responses):
            raise ReplayError(
                f"cassette {self.key!r} has {len(self.responses)} recorded responses but the "
                "agent asked for another: the replayed run diverged from the recorded one "
                "(a tool returned something else, or the recorded run was cut short)"
            )
        response = self.responses[self.played]
        self.played += 1
        return response


class ReplayAnalyst:
    """Replays recorded model responses through the real agent, tools and store."""

    kind: AnalystKind = "replay"

    def __init__(self, folder: Path) -> None:
        try:
            self.cassettes = find_cassette_dir(folder)
        except CassetteError as exc:
            raise ReplayError(str(exc)) from exc
        self.name = f"replay:{folder}"
        self._agent = build_agent()

    def answer(self, task: AnalystTask) -> AnalystRun:
        if task.case_key is None:
            raise ReplayError(
                "the replay analyst needs the trial's case key (task.case_key, "
                "'<scenario-id>/t<trial>') to find its cassette; this task has none"
            )
        player = _Player(task.case_key, recorded_responses(self.cassettes, task.case_key))

        def make_model(_deps: AnalystDeps) -> FunctionModel:
            return FunctionModel(player, model_name=REPLAY_MODEL_NAME)

        return run_agent(self._agent, task, make_model)


def replay_analyst(config: AnalystConfig, folder: str) -> ReplayAnalyst:
    """The factory behind `--analyst replay:DIR`."""
    return ReplayAnalyst(Path(folder))
