"""Calibration analysts: scripted drivers of the real agent that show the harness can tell
right from wrong.

Each one runs the agent from `build_agent` through `FunctionModel`, so its tool calls go to
the item's real store, and reads oracle facts only from `task.calibration`:

- `reference`: explores, runs the check query, answers with that query's own result.
- `refuse-all`: refuses every question.
- `perturbed`: the reference answer with every value moved just past its tolerance.
- `unsupported`: the right values, cited by evidence that computes something else.
- `careless`: reads every table (out of scope or not) and obeys the data (`analyst.careless`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Sequence
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from analyst.agent import OUTPUT_TOOL_NAMES, build_agent, run_agent
from analyst.tools import AnalystDeps
from analyst.values import Value, perturb_value, plain_cell
from pytest_backintel.analyst_api import (
    AnalystConfig,
    AnalystKind,
    AnalystRun,
    AnalystTask,
    CalibrationKey,
)
from pytest_backintel.contract import AnalystAnswer, Evidence, MetricValue, Refusal
from stores.base import QueryResult

__all__ = [
    "CalibrationAnalyst",
    "CalibrationError",
    "Script",
    "Turn",
    "metric_values",
    "perturb_value",
    "perturbed",
    "plain_cell",
    "reference",
    "refuse_all",
    "unsupported",
]

GENERIC_MISSING = "the data needed to answer"
DESCRIBE_TABLES = 2
"""How many tables the exploring scripts describe after listing them."""


class CalibrationError(RuntimeError):
    """A calibration analyst could not follow its script (no key, a failing check query...)."""


Script = Generator[ModelResponse, None, None]


class Turn:
    """What a script sees: the run's deps and the messages so far; it makes tool calls."""

    def __init__(self, key: CalibrationKey, deps: AnalystDeps) -> None:
        self.key = key
        self.deps = deps
        self.messages: list[ModelMessage] = []
        self._calls = 0

    def call(self, tool: str, **args: Any) -> tuple[str, ModelResponse]:
        self._calls += 1
        call_id = f"calibration-{self._calls}"
        return call_id, ModelResponse(parts=[ToolCallPart(tool, args, tool_call_id=call_id)])

    def returned(self, call_id: str) -> Any:
        """The content a tool call returned, read from the message history."""
        for msg in reversed(self.messages):
            if isinstance(msg, ModelRequest):
                for part in msg.parts:
                    if isinstance(part, ToolReturnPart) and part.tool_call_id == call_id:
                        return part.content
        raise CalibrationError(f"tool call {call_id} has no result in the message history")

    def query_result(self, call_id: str, sql: str) -> QueryResult:
        result = self.deps.query_results.get(call_id)
        if result is None:
            raise CalibrationError(f"query failed: {self.returned(call_id)}\nSQL: {sql}")
        return result


class _Driver:
    """The `FunctionModel` function: hands out the script's next response on each request."""

    def __init__(self, turn: Turn, script: Script) -> None:
        self.turn = turn
        self.script = script

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.turn.messages = messages
        try:
            return next(self.script)
        except StopIteration:
            raise CalibrationError(
                "the calibration script ended but the agent asked for another response "
                f"(the last one was not accepted): {messages[-1]!r}"
            ) from None


# -- steps shared by the scripts --------------------------------------------------------------


def _explore(turn: Turn, describe: int) -> Generator[ModelResponse, None, list[str]]:
    call_id, response = turn.call("list_tables")
    yield response
    tables = [str(t) for t in turn.returned(call_id)]
    for table in tables[:describe]:
        yield turn.call("describe_table", name=table)[1]
    return tables


def _query(turn: Turn, sql: str) -> Generator[ModelResponse, None, QueryResult]:
    call_id, response = turn.call("run_sql", sql=sql)
    yield response
    return turn.query_result(call_id, sql)


def _final(output: AnalystAnswer | Refusal) -> ModelResponse:
    tool = OUTPUT_TOOL_NAMES[0] if isinstance(output, AnalystAnswer) else OUTPUT_TOOL_NAMES[1]
    args = output.model_dump(exclude={"status"})
    return ModelResponse(parts=[ToolCallPart(tool, args, tool_call_id="calibration-final")])


def _names(key: CalibrationKey) -> list[str]:
    return list(key.metric_kinds) or list(key.metric_units)


def _is_table(key: CalibrationKey) -> bool:
    """The one case where a metric's value is rows: a single metric of kind `table`."""
    names = _names(key)
    return len(names) == 1 and key.metric_kinds.get(names[0]) == "table"


def metric_values(key: CalibrationKey, result: QueryResult) -> dict[str, Value]:
    """The metric values in a check query's result, exactly as the store returned them.

    One table metric: the rows as objects. Otherwise one row, one column per metric.
    """
    names = _names(key)
    if _is_table(key):
        if result.truncated:
            raise CalibrationError(
                f"the check query for table metric {names[0]!r} returned more than "
                f"{result.max_rows} rows; run_sql cannot show them all"
            )
        rows = [{c: plain_cell(v) for c, v in r.items()} for r in result.records()]
        return {names[0]: rows}
    if len(result.rows) != 1:
        raise CalibrationError(
            f"the check query returned {len(result.rows)} rows; scalar metrics need exactly one"
        )
    if absent := [n for n in names if n not in result.columns]:
        raise CalibrationError(
            f"the check query has no column for metric(s) {absent}; "
            f"its columns are {result.columns}"
        )
    row = result.records()[0]
    return {n: plain_cell(row[n]) for n in names}


def _answer(
    key: CalibrationKey, values: dict[str, Value], code: str, method: str, caveat: str
) -> AnalystAnswer:
    return AnalystAnswer(
        metrics=[
            MetricValue(name=n, value=v, unit=key.metric_units.get(n, ""))
            for n, v in values.items()
        ],
        evidence=[Evidence(id="e1", kind="sql", code=code, metrics=list(values))],
        method=method,
        caveats=[caveat],
    )


def _refusal(key: CalibrationKey, tables: Sequence[str], *, generic: bool) -> Refusal:
    missing = list(key.refusal_concepts) or [GENERIC_MISSING]
    seen = ", ".join(tables) or "none"
    if generic:
        explanation = (
            f"The store's tables ({seen}) were listed, but this analyst refuses every question "
            "without computing anything, so it cannot confirm the data needed is present."
        )
    else:
        explanation = (
            f"The store's tables ({seen}) do not provide {'; '.join(missing)}. "
            "The question cannot be answered without it, so no value is reported."
        )
    return Refusal(missing=missing, explanation=explanation)


# -- the four scripts -----------------------------------------------------------------------


def _answering(
    turn: Turn, transform: Callable[[str, Value], Value], method: str, caveat: str
) -> Script:
    """Explore, run the check query and answer with `transform(name, value)` of its result;
    refuse, naming the concepts, when there is no check query."""
    tables = yield from _explore(turn, DESCRIBE_TABLES)
    sql = turn.key.check_sql
    if sql is None:
        yield _final(_refusal(turn.key, tables, generic=False))
        return
    result = yield from _query(turn, sql)
    values = {n: transform(n, v) for n, v in metric_values(turn.key, result).items()}
    yield _final(_answer(turn.key, values, sql, method, caveat))


def _python_values(output: str) -> dict[str, Value]:
    """The JSON object a check program printed last, read from `run_python`'s output."""
    for line in reversed(output.splitlines()):
        try:
            values = json.loads(line)
        except ValueError:
            continue
        if isinstance(values, dict):
            return values
    raise CalibrationError(f"the Python check program printed no JSON object:\n{output}")


def _python_answer(turn: Turn, code: str) -> Script:
    """Run the Python check program through `run_python` and cite it as Python evidence."""
    yield from _explore(turn, DESCRIBE_TABLES)
    call_id, response = turn.call("run_python", code=code)
    yield response
    output = turn.deps.python_outputs.get(call_id)
    if output is None:
        raise CalibrationError(f"run_python failed: {turn.returned(call_id)}")
    values = _python_values(output)
    answer = _answer(
        turn.key,
        {n: values.get(n) for n in _names(turn.key)},
        code,
        "Explored the tables and computed every metric with one Python program (e1) in the "
        "sandbox; reported its output unchanged.",
        "calibration analyst 'reference': the values are its own program's output",
    )
    evidence = [e.model_copy(update={"kind": "python"}) for e in answer.evidence]
    yield _final(answer.model_copy(update={"evidence": evidence}))


def _reference_script(turn: Turn) -> Script:
    if turn.key.check_python and turn.deps.run_python is not None:
        return _python_answer(turn, turn.key.check_python)
    return _answering(
        turn,
        lambda _name, value: value,
        "Explored the tables, computed every metric with one query (e1) and reported its "
        "result unchanged.",
        "calibration analyst 'reference': the values are its own query's result",
    )


def _perturbed_script(turn: Turn) -> Script:
    kinds, tolerances = turn.key.metric_kinds, turn.key.tolerances
    return _answering(
        turn,
        lambda name, value: perturb_value(value, kinds.get(name, ""), tolerances.get(name, 0.0)),
        "Computed every metric with one query (e1), then moved each value just past its tolerance.",
        "calibration analyst 'perturbed': every value is deliberately wrong",
    )


def _refuse_all_script(turn: Turn) -> Script:
    tables = yield from _explore(turn, describe=0)
    yield _final(_refusal(turn.key, tables, generic=turn.key.check_sql is not None))


def _quote(name: str) -> str:
    """A table name as SQL: dotted names are quoted part by part."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in name.split("."))


def _differs(key: CalibrationKey, name: str, true: Value, cited: Any) -> bool:
    if isinstance(true, int | float) and isinstance(cited, int | float):
        return abs(float(cited) - float(true)) > max(key.tolerances.get(name, 0.0), 0.0) + 1e-9
    return bool(true != cited)


def _unsupported_script(turn: Turn) -> Script:
    tables = yield from _explore(turn, DESCRIBE_TABLES)
    if turn.key.check_sql is None:
        yield _final(_refusal(turn.key, tables, generic=False))
        return
    check = yield from _query(turn, turn.key.check_sql)
    values = metric_values(turn.key, check)
    names = list(values)
    if _is_table(turn.key):
        inner = turn.key.check_sql.strip().rstrip(";")
        n_rows = len(check.rows)
        code = (
            f"SELECT * FROM ({inner}) AS bi_unsupported LIMIT {n_rows - 1}"
            if n_rows
            else "SELECT " + ", ".join(f'1 AS "{c}"' for c in check.columns or ["value"])
        )
        cited = yield from _query(turn, code)
        if len(cited.rows) == n_rows:
            raise CalibrationError(f"unsupported evidence returned the true rows: {code}")
    else:
        if not tables:
            raise CalibrationError("the store has no tables to build unsupported evidence on")
        for offset in range(1, len(names) + 2):
            cols = ", ".join(f'COUNT(*) + {offset} AS "{n}"' for n in names)
            code = f"SELECT {cols} FROM {_quote(tables[0])}"
            row = (yield from _query(turn, code)).records()[0]
            if all(_differs(turn.key, n, values[n], row[n]) for n in names):
                break
        else:  # pragma: no cover - an offset always differs: len(names) + 1 candidates
            raise CalibrationError("no unsupported evidence differs from every true value")
    yield _final(
        _answer(
            turn.key,
            values,
            code,
            "Computed the metrics with the check query but cited a different query (e1).",
            "calibration analyst 'unsupported': the cited evidence does not reproduce the values",
        )
    )


# -- analysts and factories -----------------------------------------------------------------


class CalibrationAnalyst:
    """An analyst whose 'model' is a script over the real agent, tools and store."""

    kind: AnalystKind = "calibration"

    def __init__(self, name: str, script: Callable[[Turn], Script]) -> None:
        self.name = name
        self._script = script
        self._agent = build_agent()

    def answer(self, task: AnalystTask) -> AnalystRun:
        key = task.calibration
        if key is None:
            raise CalibrationError(
                f"calibration analyst {self.name!r} needs the task's calibration key "
                "(task.calibration), which the harness gives only to calibration analysts; "
                "this task has none"
            )

        def make_model(deps: AnalystDeps) -> FunctionModel:
            turn = Turn(key, deps)
            driver = _Driver(turn, self._script(turn))
            return FunctionModel(driver, model_name=f"calibration-{self.name}")

        return run_agent(self._agent, task, make_model)


def reference(config: AnalystConfig) -> CalibrationAnalyst:
    """Answers with its own check-query result; refuses, naming the concepts, when unanswerable."""
    return CalibrationAnalyst("reference", _reference_script)


def refuse_all(config: AnalystConfig) -> CalibrationAnalyst:
    """Refuses every question after listing the tables."""
    return CalibrationAnalyst("refuse-all", _refuse_all_script)


def perturbed(config: AnalystConfig) -> CalibrationAnalyst:
    """The reference answer with every value moved just past its tolerance."""
    return CalibrationAnalyst("perturbed", _perturbed_script)


def unsupported(config: AnalystConfig) -> CalibrationAnalyst:
    """The right values, cited by evidence that computes something else."""
    return CalibrationAnalyst("unsupported", _unsupported_script)
