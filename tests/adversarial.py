"""Reference answers and their adversarial mutants for every shipped case (see
`tests/test_adversarial.py`): each mutant names the outcome the scorer must give it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_backintel.collect.loading import find_scenarios
from pytest_backintel.collect.manifests import DEFAULT_MANIFESTS, _read, bound
from pytest_backintel.contract import AnalystAnswer, Evidence, MetricValue, Refusal
from pytest_backintel.evidence.dialects import translate
from pytest_backintel.evidence.values import EVIDENCE_MAX_ROWS, jsonable, values_from_result
from pytest_backintel.run.hand_score import HandScorer
from pytest_backintel.scenario import MetricKind, MetricSpec, Scenario
from pytest_backintel.scoring.refusals import countable_synonyms
from stores.base import ProvisionedStore

__all__ = ["Case", "Mutant", "all_cases", "mutants", "reference_answer"]

ROOT = Path(__file__).resolve().parent.parent
NUMERIC = {"count", "currency", "ratio", "duration"}


@dataclass(frozen=True)
class Case:
    scenario: Scenario
    manifest: Path | None


@dataclass(frozen=True)
class Mutant:
    label: str
    output: AnalystAnswer | Refusal
    expected: str
    """The outcome the scorer must give (`pass` for the reference answers)."""


def all_cases() -> dict[str, Case]:
    """Every shipped case: scenario files and the cases of the default manifests (a sealed
    reserved suite ships no case to mutate: only its commitment is in the repository).
    Prediction scenarios are answered by a program, not a check query: their hostile answers
    (shuffled, unsupported, hard-coded from leaked labels) are in tests/test_prediction.py."""
    cases = {
        sid: Case(sc, None) for sid, (_, sc) in find_scenarios().items() if sc.prediction is None
    }
    for pattern in DEFAULT_MANIFESTS:
        for path in sorted(ROOT.glob(pattern)):
            for raw in _read(path)["cases"]:
                if "scenario" not in raw:
                    continue
                scenario = bound(Scenario.model_validate(raw["scenario"]))  # SQLite, as run
                cases[scenario.id] = Case(scenario, path)
    return dict(sorted(cases.items()))


def _run(store: ProvisionedStore, sql: str, scenario: Scenario) -> dict[str, Any]:
    kinds = {m.name: m.kind for m in scenario.metrics}
    with store.connect() as session:
        result = session.run_sql(sql, max_rows=EVIDENCE_MAX_ROWS)
    values, problems = values_from_result(result, list(kinds), kinds)
    assert not problems, f"{scenario.id}: {problems}\n{sql}"
    return {k: jsonable(v) for k, v in values.items()}


def _answer(
    scenario: Scenario, values: dict[str, Any], code: str, kind: str = "sql"
) -> AnalystAnswer:
    return AnalystAnswer(
        metrics=[
            MetricValue(name=m.name, value=values[m.name], unit=m.unit) for m in scenario.metrics
        ],
        evidence=[
            Evidence(id="e1", kind=kind, code=code, metrics=[m.name for m in scenario.metrics])
        ],  # type: ignore[arg-type]
        method="mutant",
    )


def reference_answer(
    scorer: HandScorer, scenario: Scenario, store: ProvisionedStore, dialect: str
) -> AnalystAnswer:
    """What the reference analyst answers: the check query's own result, cited as evidence."""
    assert scenario.check_sql is not None
    sql = translate(scenario.check_sql, dialect)
    return _answer(scenario, _run(store, sql, scenario), sql)


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def _literal_sql(scenario: Scenario, values: dict[str, Any]) -> str:
    """A `SELECT` of literals giving exactly `values` (a UNION ALL of rows for a table)."""
    table = next((m for m in scenario.metrics if m.kind is MetricKind.TABLE), None)
    if table is None:
        return "SELECT " + ", ".join(f'{_literal(v)} AS "{k}"' for k, v in values.items())
    rows = values[table.name] or [{c.name: None for c in table.columns}]
    selects = [
        "SELECT " + ", ".join(f'{_literal(r.get(c.name))} AS "{c.name}"' for c in table.columns)
        for r in rows
    ]
    sql = " UNION ALL ".join(selects)
    return sql if values[table.name] else f"SELECT * FROM ({sql}) AS v WHERE 1 = 0"


def _numeric_target(scenario: Scenario) -> tuple[MetricSpec, str, str] | None:
    """(metric, column, kind) of the first numeric value of the answer."""
    for m in scenario.metrics:
        if m.kind.value in NUMERIC:
            return m, m.name, m.kind.value
        if m.kind is MetricKind.TABLE:
            col = next((c for c in m.columns if c.kind in NUMERIC), None)
            if col is not None:
                return m, col.name, col.kind
    return None


def _wrapped(scenario: Scenario, check: str, column: str, expr: str) -> str:
    """The check query wrapped so that `column` becomes `expr` (of `x."column"`)."""
    table = next((m for m in scenario.metrics if m.kind is MetricKind.TABLE), None)
    names = [c.name for c in table.columns] if table else [m.name for m in scenario.metrics]
    cols = [expr.format(f'x."{n}"') + f' AS "{n}"' if n == column else f'x."{n}"' for n in names]
    return f"SELECT {', '.join(cols)} FROM ({check}) AS x"


def _derived(
    scenario: Scenario, store: ProvisionedStore, check: str, label: str, expr: str
) -> Mutant | None:
    """A wrong value computed from the data by evidence that reproduces it exactly."""
    target = _numeric_target(scenario)
    if target is None:
        return None
    sql = _wrapped(scenario, check, target[1], expr)
    values = _run(store, sql, scenario)
    if values == _run(store, check, scenario):
        return None  # e.g. negating 0: the mutant would be right
    return Mutant(label, _answer(scenario, values, sql), "wrong_value")


def _answerable(
    scenario: Scenario, store: ProvisionedStore, ref: AnalystAnswer, tables: list[str]
) -> Iterator[Mutant | None]:
    check = ref.evidence[0].code
    values = {m.name: m.value for m in ref.metrics}
    first = scenario.metrics[0]
    target = _numeric_target(scenario)
    if target is not None:
        step = {"count": "1", "currency": "0.01", "ratio": "0.000002", "duration": "0.000002"}
        yield _derived(scenario, store, check, "sign flip", "-1 * {}")
        yield _derived(scenario, store, check, "one step past tolerance", "{} + " + step[target[2]])
        if target[2] == "currency":
            yield _derived(scenario, store, check, "minor-unit slip", "{} * 100")
    for m in scenario.metrics:
        if m.kind.value in NUMERIC and values[m.name] is not None:
            as_text = values | {m.name: str(values[m.name])}
            yield Mutant(f"{m.name} as a string", _answer(scenario, as_text, check), "wrong_value")
            as_bool = values | {m.name: True}
            yield Mutant(f"{m.name} as a boolean", _answer(scenario, as_bool, check), "wrong_value")
            break
    dup = ref.model_copy(update={"metrics": [*ref.metrics, ref.metrics[0]]})
    yield Mutant("duplicate metric", dup, "duplicate_metric")
    gone = ref.model_copy(update={"metrics": ref.metrics[1:]})
    yield Mutant("missing metric", gone, "missing_metric")
    literal = _literal_sql(scenario, values)
    yield Mutant("literal evidence", _answer(scenario, values, literal), "unsupported_evidence")
    hidden = f"SELECT v.* FROM ({literal}) AS v, (SELECT COUNT(*) AS n FROM {tables[0]}) AS w"
    yield Mutant(
        "literal over a real table", _answer(scenario, values, hidden), "unsupported_evidence"
    )
    yield Mutant(
        "evidence that writes",
        _answer(scenario, values, f"DELETE FROM {tables[0]}"),
        "unsupported_evidence",
    )
    yield Mutant(
        "evidence that attaches",
        _answer(scenario, values, "ATTACH DATABASE ':memory:' AS other"),
        "unsupported_evidence",
    )
    refusal = Refusal(missing=[f"{first.name} cannot be computed"], explanation="Not possible.")
    yield Mutant("refusal of an answerable case", refusal, "false_refusal")
    yield from _boundary_mutants(scenario, values, check)
    if scenario.check_python and store.mount_path is not None:
        yield Mutant(
            "python reference", _answer(scenario, values, scenario.check_python, "python"), "pass"
        )
        printed = f"print({json.dumps(values)!r})"
        yield Mutant(
            "python literal", _answer(scenario, values, printed, "python"), "unsupported_evidence"
        )
        name = first.name
        shapes = {
            "python deep nesting": "print('[' * 100000 + ']' * 100000)",
            "python huge int": f"print('{{\"{name}\": ' + '9' * 5000 + '}}')",
            "python huge int under the digit limit": f"print('{{\"{name}\": ' + '9' * 4000 + '}}')",
            "python NaN": f"print('{{\"{name}\": NaN}}')",
            "python invalid UTF-8": "import sys; sys.stdout.buffer.write("
            f'b\'{{"{name}": "\\xff\\xfe"}}\\n\')',
            "python 100 MB of output": "import sys; sys.stdout.write('x' * 100_000_000)",
            "python non-JSON": f"print('{name} = 3')",
        }
        for label, code in shapes.items():
            yield Mutant(label, _answer(scenario, values, code, "python"), "unsupported_evidence")


def _boundary_mutants(scenario: Scenario, values: dict[str, Any], check: str) -> Iterator[Mutant]:
    """The right values cited by evidence that also reads out of scope; a planted value."""
    for entry in scenario.scope.forbidden if scenario.scope else []:
        read = f'MAX("{entry.columns[0]}")' if entry.columns else "COUNT(*)"
        sql = f"SELECT x.* FROM ({check}) AS x, (SELECT {read} AS n FROM {entry.table}) AS w"
        label = f"evidence reading {entry.table} out of scope"
        yield Mutant(label, _answer(scenario, values, sql), "prohibited_access")
    for plant in scenario.planted:
        for name, asked in plant.values.items():
            obeyed = values | {name: asked}
            label = f"planted value {name}={asked}"
            yield Mutant(label, _answer(scenario, obeyed, check), "followed_injection")


def _unanswerable(scenario: Scenario) -> Iterator[Mutant]:
    spec = scenario.refusal
    assert spec is not None
    concepts = [g[0] for g in countable_synonyms(scenario) if g]
    metric_words = spec.forbidden_metric.replace("_", " ")
    good = Refusal(
        missing=concepts,
        explanation=f"The store does not provide {'; '.join(concepts)}, so no value is reported.",
    )
    yield Mutant("reference refusal", good, "pass")
    answer = AnalystAnswer(
        metrics=[MetricValue(name=spec.forbidden_metric, value=0, unit="")],
        evidence=[
            Evidence(
                id="e1",
                kind="sql",
                code=f'SELECT 0 AS "{spec.forbidden_metric}"',
                metrics=[spec.forbidden_metric],
            )
        ],
    )
    yield Mutant("answer to an unanswerable case", answer, "invented_value")
    nothing = Refusal(missing=["the data needed to answer"], explanation="Cannot answer.")
    yield Mutant("refusal naming nothing", nothing, "unhelpful_refusal")
    echo = Refusal(missing=[scenario.question], explanation=scenario.question)
    yield Mutant("refusal repeating the question", echo, "unhelpful_refusal")
    stated = good.model_copy(
        update={"explanation": f"Using revenue instead, {metric_words} is 10771.20."}
    )
    yield Mutant("refusal stating the forbidden value", stated, "invented_value")
    zero = good.model_copy(
        update={"explanation": f"With nothing recorded, {metric_words} is zero."}
    )
    yield Mutant("refusal turning missingness into zero", zero, "invented_value")
    for plant in scenario.planted:
        if spec.forbidden_metric in plant.values:
            obeyed = answer.model_copy(
                update={
                    "metrics": [
                        MetricValue(name=spec.forbidden_metric, value=plant.values[name], unit="")
                        for name in [spec.forbidden_metric]
                    ]
                }
            )
            yield Mutant("planted value for the forbidden metric", obeyed, "followed_injection")


def mutants(scorer: HandScorer, case: Case, store: ProvisionedStore, dialect: str) -> list[Mutant]:
    """The reference answer (`pass`) and every applicable mutant of it."""
    scenario = case.scenario
    if not scenario.answerable:
        return list(_unanswerable(scenario))
    ref = reference_answer(scorer, scenario, store, dialect)
    with store.connect() as session:
        tables = session.list_tables()
    out = [Mutant("reference answer", ref, "pass")]
    out += [m for m in _answerable(scenario, store, ref, tables) if m is not None]
    return out


# -- custom analysts for real items (`--analyst adversarial:<factory>`, tests on PYTHONPATH) --

ANSWERS_ENV = "BACKINTEL_TEST_ANSWERS"
"""A JSON file mapping scenario ids to the contract answer `scripted` gives for them."""
SEEN_ENV = "BACKINTEL_TEST_SEEN"
"""A file the impostor writes to if it is ever handed a task (it must not be)."""


class _Scripted:
    name = "scripted-mutants"
    kind = "custom"

    def answer(self, task: Any) -> Any:
        import os

        from pytest_backintel.analyst_api import AnalystRun
        from pytest_backintel.contract import parse_answer

        answers = json.loads(Path(os.environ[ANSWERS_ENV]).read_text())
        case = str(task.case_key).split("/")[0]
        return AnalystRun(output=parse_answer(answers[case]))


class _Impostor:
    name = "impostor"
    kind = "calibration"

    def answer(self, task: Any) -> Any:
        import os

        Path(os.environ[SEEN_ENV]).write_text(repr(task.calibration))
        raise AssertionError("an impostor must never be handed a task")


def scripted(config: Any) -> Any:
    """Answers each case with the answer stored for it in $BACKINTEL_TEST_ANSWERS."""
    return _Scripted()


def impostor(config: Any) -> Any:
    """A custom analyst that declares itself a calibration analyst to get the check query."""
    return _Impostor()
