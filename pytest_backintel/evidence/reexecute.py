"""Evidence re-execution: run every cited program again and see whether it reproduces the answer.

SQL evidence runs on a fresh read-only connection to the item's store; its result must have a
column named exactly as each metric it cites (one row for scalar metrics, the rows themselves
for a table metric). Python evidence runs in a fresh sandbox and prints a JSON object of values.
The output must be exactly what was reported (counts exactly, other numbers to floating-point
noise). Evidence must also be derived from the store: SQL whose plan reads no table is
unsupported, and every program runs again on the data probe (a perturbed copy of the data,
`pytest_backintel.evidence.probe`) where its values must follow the data, i.e. agree with the
evaluator's check query there under the metric's tolerance.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_backintel.contract import AnalystAnswer, Evidence
from pytest_backintel.evidence.values import EVIDENCE_MAX_ROWS, jsonable, values_from_result
from pytest_backintel.scenario import Scenario
from pytest_backintel.tolerance import compare_metric, reproduces
from stores.base import ProvisionedStore, QueryError, StoreSession

if TYPE_CHECKING:
    from pytest_backintel.evidence.probe import DataProbe

__all__ = [
    "EvidenceResult",
    "PythonRunner",
    "reexecute",
]

PythonRunner = Callable[[str], Mapping[str, Any]]
"""Runs Python evidence in a fresh sandbox; returns the printed JSON object or raises
`EvidenceRunError` with a readable reason (limit hit, no JSON, crash)."""


class EvidenceRunError(Exception):
    """Evidence could not be run to completion; the message says why."""


@dataclass
class EvidenceResult:
    """The re-execution of one evidence item."""

    id: str
    kind: str
    code: str
    cited: list[str]
    ran: bool = False
    error: str | None = None
    values: dict[str, Any] = field(default_factory=dict)
    """What the program produced for each cited metric."""
    reproduced: dict[str, bool] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.ran and self.error is None and all(self.reproduced.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "code": self.code,
            "cited": self.cited,
            "ran": self.ran,
            "error": self.error,
            "values": jsonable(self.values),
            "reproduced": self.reproduced,
            "details": self.details,
        }


def _reads_no_table(session: StoreSession, code: str) -> bool:
    """True when the engine's plan for `code` reads no table (None from a backend: unknown)."""
    tables = session.tables_read(code)
    return tables is not None and not tables


def _run_one(
    item: Evidence,
    scenario: Scenario,
    session: Callable[[], AbstractContextManager[StoreSession]],
    python: PythonRunner | None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The values `item` gives: its SQL run in a session from `session()`, or its program."""
    kinds = {m.name: m.kind for m in scenario.metrics}
    if item.kind == "sql":
        with session() as open_session:
            result = open_session.run_sql(item.code, max_rows=EVIDENCE_MAX_ROWS)
        return values_from_result(result, item.metrics, kinds)
    if python is None:
        raise EvidenceRunError("python evidence needs a sandbox, and none is configured")
    printed = python(item.code)
    values = {m: printed[m] for m in item.metrics if m in printed}
    problems = {
        m: f"the program printed no value for {m!r}" for m in item.metrics if m not in printed
    }
    return values, problems


def _follows_data(
    res: EvidenceResult, item: Evidence, scenario: Scenario, probe: DataProbe
) -> None:
    """Run `item` on the probe; a cited value that is not what the data gives there fails."""
    expected, unknown = probe.check(scenario)
    if unknown is not None:
        return  # the evaluator's own query cannot say; the harness, not the analyst, is short
    try:
        values, problems = _run_one(item, scenario, probe.session, probe.python())
    except (QueryError, EvidenceRunError) as exc:
        for name in item.metrics:
            res.reproduced[name] = False
            res.details[name] = f"on a perturbed copy of the data the evidence failed: {exc}"
        return
    for name in item.metrics:
        spec = scenario.metric(name)
        if spec is None or not res.reproduced.get(name):
            continue
        got = values.get(name)
        cmp = compare_metric(spec, expected.get(name), got) if name not in problems else None
        if cmp is None or not cmp.ok:
            why = problems.get(name) or (
                f"it gave {jsonable(got)!r} where the data gives {jsonable(expected.get(name))!r}"
            )
            res.reproduced[name] = False
            res.details[name] = (
                "the evidence does not follow the data: on a perturbed copy of the store " + why
            )


def _check_one(
    res: EvidenceResult,
    item: Evidence,
    scenario: Scenario,
    store: ProvisionedStore,
    python: PythonRunner | None,
    probes: Sequence[DataProbe],
    reported: Mapping[str, Any],
) -> None:
    """Run one evidence item, compare its output with the answer, then on every probe."""
    with store.connect() as session:  # one session for the statement and its plan
        values, problems = _run_one(item, scenario, lambda: nullcontext(session), python)
        reads_nothing = item.kind == "sql" and _reads_no_table(session, item.code)
    if reads_nothing:
        raise EvidenceRunError(
            "the query reads no table of the store: evidence must be derived from the data, "
            "not written as literals"
        )
    res.ran, res.values = True, values
    for name in item.metrics:
        spec = scenario.metric(name)
        if name in problems:
            res.reproduced[name], res.details[name] = False, problems[name]
        elif spec is None or name not in reported:
            res.reproduced[name] = False
            res.details[name] = f"cites {name!r}, which the answer does not report"
        else:
            cmp = reproduces(spec, values[name], reported[name])
            res.reproduced[name] = cmp.ok
            if not cmp.ok:
                res.details[name] = (
                    "re-execution gave a different value (expected: what it gave; got: what "
                    f"the answer reports): {cmp.detail}"
                )
    for probe in probes:
        if any(res.reproduced.values()):
            _follows_data(res, item, scenario, probe)


def reexecute(
    answer: AnalystAnswer,
    scenario: Scenario,
    store: ProvisionedStore,
    python: PythonRunner | None = None,
    probes: Sequence[DataProbe] = (),
) -> list[EvidenceResult]:
    """Re-run every evidence item of `answer`, compare with the reported values exactly, and
    (on each of `probes`) check that the values are derived from the data."""
    reported = {m.name: m.value for m in answer.metrics}
    results = []
    for item in answer.evidence:
        res = EvidenceResult(item.id, item.kind, item.code, list(item.metrics))
        try:
            _check_one(res, item, scenario, store, python, probes, reported)
        except (QueryError, EvidenceRunError) as exc:
            res.ran, res.error = False, str(exc)
        except RecursionError:
            res.ran, res.error = False, "the evidence output nests too deeply to be compared"
        except (TypeError, ValueError, ArithmeticError, KeyError) as exc:
            res.ran, res.error = False, f"the evidence output cannot be compared: {exc!r}"[:500]
        results.append(res)
    return results
