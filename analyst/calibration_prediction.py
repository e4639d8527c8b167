"""Calibration scripts for prediction scenarios (`CalibrationKey.prediction`): each runs the
scenario's reference program (`check_python`) through `run_python`, then

- `perturbed`: reports its predictions shuffled (reassigned in reversed rank order, so the
  ranking is the worst there is), citing the program, which does not produce them;
- `unsupported`: reports its predictions but cites a program that predicts a constant.

The reference analyst needs no script of its own: it cites the program it ran
(`analyst.calibration`).
"""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any, Protocol

from pydantic_ai.messages import ModelResponse, ToolCallPart

from analyst.agent import OUTPUT_TOOL_NAMES
from analyst.tools import AnalystDeps
from pytest_backintel.analyst_api import CalibrationKey
from pytest_backintel.contract import AnalystAnswer, Evidence, MetricValue

__all__ = ["PredictionScriptError", "perturbed_prediction", "unsupported_prediction"]

Script = Generator[ModelResponse, None, None]


class PredictionScriptError(RuntimeError):
    """The reference program did not run or printed no predictions."""


class TurnLike(Protocol):
    key: CalibrationKey
    deps: AnalystDeps

    def call(self, tool: str, **args: Any) -> tuple[str, ModelResponse]: ...

    def returned(self, call_id: str) -> Any: ...


def _spec(turn: TurnLike) -> dict[str, Any]:
    if turn.key.prediction is None or not turn.key.check_python:
        raise PredictionScriptError("not a prediction scenario with a reference program")
    return turn.key.prediction


def _metric(turn: TurnLike) -> str:
    return next(iter(turn.key.metric_kinds))


def _predicted(turn: TurnLike) -> Generator[ModelResponse, None, list[dict[str, Any]]]:
    """List the tables, run the reference program, and return the predictions it printed."""
    yield turn.call("list_tables")[1]
    call_id, response = turn.call("run_python", code=turn.key.check_python)
    yield response
    output = turn.deps.python_outputs.get(call_id)
    if output is None:
        raise PredictionScriptError(f"run_python failed: {turn.returned(call_id)}")
    for line in reversed(output.splitlines()):
        try:
            printed = json.loads(line)
        except ValueError:
            continue
        if isinstance(printed, dict) and isinstance(printed.get(_metric(turn)), list):
            return [dict(r) for r in printed[_metric(turn)]]
    raise PredictionScriptError(f"the reference program printed no predictions:\n{output[:500]}")


def _final(turn: TurnLike, rows: list[dict[str, Any]], code: str, method: str) -> ModelResponse:
    name = _metric(turn)
    answer = AnalystAnswer(
        metrics=[MetricValue(name=name, value=rows, unit=turn.key.metric_units.get(name, ""))],
        evidence=[Evidence(id="e1", kind="python", code=code, metrics=[name])],
        method=method,
        caveats=["calibration analyst: the answer is deliberately wrong"],
    )
    args = answer.model_dump(exclude={"status"})
    return ModelResponse(
        parts=[ToolCallPart(OUTPUT_TOOL_NAMES[0], args, tool_call_id="calibration-final")]
    )


def perturbed_prediction(turn: TurnLike) -> Script:
    """The reference program's predictions reassigned in reversed rank order."""
    value = _spec(turn)["value"]
    rows = yield from _predicted(turn)
    order = sorted(range(len(rows)), key=lambda i: (float(rows[i][value]), i))
    values = [rows[i][value] for i in order]
    for j, i in enumerate(order):
        rows[i] = {**rows[i], value: values[-1 - j]}
    assert turn.key.check_python is not None
    yield _final(
        turn,
        rows,
        turn.key.check_python,
        "Trained the model (e1), then reassigned its predictions in reversed rank order.",
    )


def unsupported_prediction(turn: TurnLike) -> Script:
    """The reference program's predictions, cited by a program that predicts a constant."""
    spec = _spec(turn)
    rows = yield from _predicted(turn)
    constant = 0.5 if spec["kind"] == "classification" else 0.0
    code = (
        "import json\n\nimport backintel_store as bs\n\n"
        f"score = bs.table({spec['scoring_table']!r})\n"
        f"rows = [{{{spec['entity']!r}: e, {spec['value']!r}: {constant}}} "
        f"for e in score[{spec['entity']!r}].to_list()]\n"
        f"print(json.dumps({{{_metric(turn)!r}: rows}}))\n"
    )
    yield _final(
        turn,
        rows,
        code,
        "Trained the model, but cited a program (e1) that predicts a constant.",
    )
