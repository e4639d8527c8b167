"""Evidence re-execution: run every cited program again and see whether it reproduces the answer.

SQL evidence runs on a fresh read-only connection to the item's store; its result must have a
column named exactly as each metric it cites (one row for scalar metrics, the rows themselves
for a table metric). Python evidence runs in a fresh sandbox and prints a JSON object of values.
The output must be exactly what was reported (counts exactly, other numbers to floating-point
noise). Evidence must also be derived from the store: SQL whose plan reads no table is
unsupported, and every program runs again on the data probe (a perturbed copy of the data,
`pytest_backintel.evidence.probe`) where its values must follow the data, i.e. agree with the
evaluator's check query there under the metric's tolerance.

An answer's evidence has a budget (`EvidenceBudget`): at most `max_items` items are re-executed
(each one beyond is unsupported, naming the cap) and no run (an item, or an item on a probe)
starts once `time_s` seconds of re-execution are spent (it is unsupported, naming the budget).
A run already under way ends at its own limit (the statement limit, the sandbox's wall time).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_backintel.contract import AnalystAnswer, Evidence
from pytest_backintel.evidence.predictions_table import compare_predictions
from pytest_backintel.evidence.values import EVIDENCE_MAX_ROWS, jsonable, values_from_result
from pytest_backintel.scenario import Scenario
from pytest_backintel.tolerance import compare_metric, reproduces
from stores.base import ProvisionedStore, QueryError, QueryTimeout, StoreSession

if TYPE_CHECKING:
    from pytest_backintel.evidence.probe import DataProbe
    from pytest_backintel.evidence.source_limit import StatementTimes

__all__ = [
    "EvidenceBudget",
    "EvidenceClock",
    "EvidenceResult",
    "PythonRunner",
    "reexecute",
]

PythonRunner = Callable[[str], Mapping[str, Any]]
"""Runs Python evidence in a fresh sandbox; returns the printed JSON object or raises
`EvidenceRunError` with a readable reason (limit hit, no JSON, crash)."""


class EvidenceRunError(Exception):
    """Evidence could not be run to completion; the message says why."""


@dataclass(frozen=True)
class EvidenceBudget:
    """What re-executing one answer's evidence may cost."""

    max_items: int = 20
    """Evidence items re-executed per answer; each one beyond is unsupported."""
    time_s: float = 120.0
    """Seconds of re-execution (items and their probe runs) per answer; no run starts after."""

    def __post_init__(self) -> None:
        if self.max_items < 1 or not self.time_s > 0:
            raise ValueError(f"an evidence budget needs max_items >= 1 and time_s > 0: {self}")


class EvidenceClock:
    """An answer's evidence budget and what its re-execution spent (recorded per trial)."""

    def __init__(self, budget: EvidenceBudget) -> None:
        self.budget = budget
        self.started = time.monotonic()
        self.items_run = 0
        self.items_cited = 0
        self.stopped_by: str | None = None
        """'max_items' or 'time_s' when the budget stopped re-execution, else None."""

    @property
    def spent_s(self) -> float:
        return time.monotonic() - self.started

    def check(self, what: str) -> None:
        """Raise `EvidenceRunError` naming the budget when its time is spent before `what`."""
        if self.spent_s >= self.budget.time_s:
            self.stopped_by = self.stopped_by or "time_s"
            raise EvidenceRunError(
                f"not run: the evidence budget of {self.budget.time_s:g} s per answer "
                f"(--evidence-timeout) was spent before {what}"
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "max_items": self.budget.max_items,
            "time_s": self.budget.time_s,
            "spent_s": round(self.spent_s, 3),
            "items_cited": self.items_cited,
            "items_run": self.items_run,
            "stopped_by": self.stopped_by,
        }


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
    probes: list[dict[str, Any]] = field(default_factory=list)
    """Per data probe run: `probe` (1-based), `values` the evidence gave there, `expected`
    what the data gives there, `followed` per metric, `seconds` it took there, `error` when it
    failed to run."""

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
            "probes": self.probes,
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
    res: EvidenceResult,
    item: Evidence,
    scenario: Scenario,
    probe: DataProbe,
    number: int,
    source_s: float = 0.0,
) -> None:
    """Run `item` on the probe; a cited value that is not what the data gives there fails.
    Its statements (and the check query's) may run a multiple of the `source_s` the item took
    on the source (`probe_limit`); past that the trial is blocked (`ProbeTimeout`), not failed."""
    from pytest_backintel.evidence.probe import ProbeTimeout, probe_limit

    limit = probe_limit(source_s)
    expected, unknown = probe.check(scenario, limit)
    if unknown is not None:
        res.probes.append({"probe": number, "skipped": unknown})
        return  # the evaluator's own query cannot say; the trial is marked unguarded
    started = time.monotonic()
    try:
        python = probe.python() if item.kind == "python" else None  # a probe's file is built
        values, problems = _run_one(  # only for Python
            item, scenario, lambda: probe.session(limit), python
        )
    except QueryTimeout as exc:
        raise ProbeTimeout(
            f"evidence {item.id} did not finish on perturbed copy {number} of the data (it "
            f"took {source_s:.3g} s on the source): {exc}. The harness could not check the "
            "answer, so the trial is blocked (infra_error), not failed; run it again with "
            "--retry-blocked"
        ) from exc
    except (QueryError, EvidenceRunError) as exc:
        res.probes.append({"probe": number, "error": str(exc)[:2000]})
        for name in item.metrics:
            res.reproduced[name] = False
            res.details[name] = f"on a perturbed copy of the data the evidence failed: {exc}"
        return
    followed: dict[str, bool] = {}
    res.probes.append(
        {
            "probe": number,
            "values": jsonable({m: values.get(m) for m in item.metrics}),
            "expected": jsonable({m: expected.get(m) for m in item.metrics}),
            "followed": followed,
            "seconds": round(time.monotonic() - started, 4),
        }
    )
    for name in item.metrics:
        spec = scenario.metric(name)
        if spec is None or not res.reproduced.get(name):
            continue
        got = values.get(name)
        cmp = compare_metric(spec, expected.get(name), got) if name not in problems else None
        followed[name] = cmp is not None and cmp.ok
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
    clock: EvidenceClock,
    times: StatementTimes | None = None,
) -> None:
    """Run one evidence item, compare its output with the answer, then on every probe. SQL
    the analyst ran itself may take a multiple of what it took then (`source_limit`)."""
    from pytest_backintel.evidence.probe import PROBE_TIME_FLOOR_S
    from pytest_backintel.evidence.source_limit import SourceTimeout

    sql = item.kind == "sql"
    limit = times.limit(item.code, PROBE_TIME_FLOOR_S, clock.budget.time_s) if times else None
    with store.connect() as session:  # one session for the statement and its plan
        if sql and limit is not None:
            session.set_time_limit(limit)
        started = time.monotonic()
        try:
            values, problems = _run_one(item, scenario, lambda: nullcontext(session), python)
        except QueryTimeout as exc:
            if not sql or limit is None or times is None:
                raise
            raise SourceTimeout(
                f"evidence {item.id} did not finish when re-run on the source, though the "
                f"analyst's own run of it took {times.took(item.code):.3g} s: {exc}. That is "
                "the harness's (a loaded machine), not the answer's, so the trial is blocked "
                "(infra_error), not failed; run it again with --retry-blocked, or allow more "
                "with --evidence-timeout"
            ) from exc
        source_s = time.monotonic() - started
        reads_nothing = sql and _reads_no_table(session, item.code)
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
            cmp = (
                compare_predictions(scenario.prediction, values[name], reported[name])
                if scenario.prediction is not None
                else reproduces(spec, values[name], reported[name])
            )
            res.reproduced[name] = cmp.ok
            if not cmp.ok:
                res.details[name] = (
                    "re-execution gave a different value (expected: what it gave; got: what "
                    f"the answer reports): {cmp.detail}"
                )
    for number, probe in enumerate(probes, 1):
        if not any(res.reproduced.values()):
            continue
        try:
            clock.check("the evidence ran on the perturbed data")
        except EvidenceRunError as exc:
            res.probes.append({"probe": number, "error": str(exc)})
            for name, ok in res.reproduced.items():
                if ok:
                    res.reproduced[name], res.details[name] = False, str(exc)
            return
        _follows_data(res, item, scenario, probe, number, source_s)


def reexecute(
    answer: AnalystAnswer,
    scenario: Scenario,
    store: ProvisionedStore,
    python: PythonRunner | None = None,
    probes: Sequence[DataProbe] = (),
    clock: EvidenceClock | None = None,
    times: StatementTimes | None = None,
) -> list[EvidenceResult]:
    """Re-run the evidence items of `answer` within `clock`'s budget (default: the default
    `EvidenceBudget`), compare with the reported values exactly, and (on each of `probes`)
    check that the values are derived from the data; SQL the analyst ran in its own session
    may take a multiple of what it took there (`times`, `source_limit`)."""
    clock = clock or EvidenceClock(EvidenceBudget())
    cap = clock.budget.max_items
    clock.items_cited = len(answer.evidence)
    reported = {m.name: m.value for m in answer.metrics}
    results = []
    for index, item in enumerate(answer.evidence):
        res = EvidenceResult(item.id, item.kind, item.code, list(item.metrics))
        results.append(res)
        if index >= cap:
            clock.stopped_by = clock.stopped_by or "max_items"
            res.error = (
                f"not run: the answer cites {len(answer.evidence)} evidence items and at most "
                f"{cap} are re-executed per answer (--evidence-max-items)"
            )
            continue
        try:
            clock.check(f"evidence {item.id} ran")
            clock.items_run += 1
            _check_one(res, item, scenario, store, python, probes, reported, clock, times)
        except (QueryError, EvidenceRunError) as exc:
            res.ran, res.error = False, str(exc)
        except RecursionError:
            res.ran, res.error = False, "the evidence output nests too deeply to be compared"
        except (TypeError, ValueError, ArithmeticError, KeyError) as exc:
            res.ran, res.error = False, f"the evidence output cannot be compared: {exc!r}"[:500]
    return results
