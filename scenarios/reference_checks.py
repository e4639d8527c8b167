"""The cross-checks a reference is built by: each scenario's oracle against its separately
written `check_sql` (run on the world's SQLite file with its parts attached read-only) and
its `check_python` (run in the default sandbox); the values rounded so the stored JSON is
byte-identical across builds."""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from pytest_backintel.scenario import MetricKind, MetricSpec, Scenario
from pytest_backintel.tolerance import reproduces
from scenarios.reference_errors import ReferenceError, ReferenceMismatchError
from scenarios.world_base import World
from stores.base import DatasetFiles

__all__ = ["attach_parts", "checked_values", "compare_values", "computed_reference"]

DECIMALS = 8
"""Stored floats are rounded to this many decimals (far below every tolerance) so the JSON
is byte-identical across builds."""


def _canonical(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, DECIMALS) + 0.0  # + 0.0 turns -0.0 into 0.0
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    return value


def _short(value: Any, limit: int = 400) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def attach_parts(con: sqlite3.Connection, files: DatasetFiles) -> None:
    """ATTACH each declared part's SQLite file read-only under its part name."""
    for key, path in sorted(files.extra.items()):
        if key.startswith("sqlite:"):
            alias = key.split(":", 1)[1]
            con.execute(f'ATTACH DATABASE ? AS "{alias}"', (f"{path.as_uri()}?mode=ro",))


def _run_check_sql(scenario: Scenario, files: DatasetFiles) -> dict[str, Any]:
    """The check_sql result as metric -> value (a table metric gets all rows), run on the
    world's SQLite file with its declared parts attached read-only under their aliases."""
    assert scenario.check_sql is not None
    assert files.sqlite_path is not None
    sqlite_path = files.sqlite_path
    con = sqlite3.connect(f"{sqlite_path.as_uri()}?mode=ro", uri=True)
    try:
        attach_parts(con, files)
        cur = con.execute(scenario.check_sql)
        columns = [d[0] for d in cur.description or ()]
        rows = [dict(zip(columns, r, strict=True)) for r in cur.fetchall()]
    except sqlite3.Error as exc:
        raise ReferenceMismatchError(
            f"scenario {scenario.id!r}: check_sql failed on {sqlite_path}: {exc}"
        ) from exc
    finally:
        con.close()
    tables = [m for m in scenario.metrics if m.kind is MetricKind.TABLE]
    if tables:
        if len(scenario.metrics) != 1:
            raise ReferenceMismatchError(
                f"scenario {scenario.id!r}: a table metric must be the scenario's only metric "
                f"(check_sql returns its rows); metrics: {[m.name for m in scenario.metrics]}"
            )
        wanted = {c.name for c in tables[0].columns}
        if set(columns) != wanted:
            raise ReferenceMismatchError(
                f"scenario {scenario.id!r}: check_sql columns {columns} must be exactly the "
                f"table columns {sorted(wanted)}"
            )
        return {tables[0].name: rows}
    wanted = {m.name for m in scenario.metrics}
    if set(columns) != wanted or len(rows) != 1:
        raise ReferenceMismatchError(
            f"scenario {scenario.id!r}: check_sql must return one row with exactly the columns "
            f"{sorted(wanted)}; got {len(rows)} row(s) with columns {columns}"
        )
    return rows[0]


def compare_values(
    scenario: Scenario,
    spec: MetricSpec,
    oracle_value: Any,
    sql_value: Any,
    source: str = "check_sql",
) -> None:
    """The oracle's value and the check query's (or program's) agree exactly, else a
    `ReferenceMismatchError` naming the scenario, the metric and both values."""
    if spec.kind is not MetricKind.TABLE and oracle_value is None:
        raise ReferenceMismatchError(
            f"scenario {scenario.id!r}, metric {spec.name!r}: the oracle gives NULL, so the "
            "question has no value to score; make the question's population non-empty"
        )
    cmp = reproduces(spec, oracle_value, sql_value)
    if not cmp.ok:
        raise ReferenceMismatchError(
            f"scenario {scenario.id!r}, metric {spec.name!r}: oracle value "
            f"{_short(oracle_value)} and {source} value {_short(sql_value)} disagree "
            f"({cmp.detail}; they must agree exactly: counts exactly, other numbers to 1e-9)"
        )


def _run_check_python(
    scenario: Scenario, files: DatasetFiles, mount: Path | None = None
) -> dict[str, Any]:
    """The values `check_python` prints, run in the default sandbox over the world's SQLite
    (or over `mount`)."""
    from pytest_backintel.sandbox.evidence import PythonEvidenceError, run_python_evidence
    from pytest_backintel.sandbox.registry import create_provider

    assert scenario.check_python is not None
    with tempfile.TemporaryDirectory() as tmp:
        provider = create_provider(None, Path(tmp))
        provider.setup_session()
        try:
            outcome = run_python_evidence(
                provider, mount or files.sqlite_path, scenario.check_python
            )
        finally:
            provider.teardown_session()
    if isinstance(outcome, PythonEvidenceError):
        raise ReferenceMismatchError(
            f"scenario {scenario.id!r}: check_python did not run ({outcome.kind}): {outcome.reason}"
        )
    missing = sorted({m.name for m in scenario.metrics} - set(outcome.values))
    if missing:
        raise ReferenceMismatchError(
            f"scenario {scenario.id!r}: check_python printed no value for {missing}"
        )
    return outcome.values


def checked_values(scenario: Scenario, world: World, files: DatasetFiles) -> dict[str, Any]:
    """The scenario's reference values: its oracle's, cross-checked by its `check_sql` and
    `check_python` (a prediction scenario's: its hidden labels and calibrated baseline)."""
    if scenario.prediction is not None:  # hidden labels, the reference program calibrated
        from scenarios.predict_refs import prediction_reference

        run = partial(_run_check_python, scenario, files)
        return dict(_canonical(prediction_reference(scenario, world, files, run)))
    oracle = world.oracles.get(scenario.oracle_name)
    if oracle is None:
        raise ReferenceMismatchError(
            f"scenario {scenario.id!r}: no oracle {scenario.oracle_name!r} registered for world "
            f"{world.name!r}; add one to the world's oracle registry"
        )
    values = oracle(files.parquet_dir)
    declared = {m.name for m in scenario.metrics}
    if set(values) != declared:
        raise ReferenceMismatchError(
            f"scenario {scenario.id!r}: oracle {scenario.oracle_name!r} returned metrics "
            f"{sorted(values)}, the scenario declares {sorted(declared)}"
        )
    if files.sqlite_path is None:
        raise ReferenceError(f"world {world.name!r} has no SQLite build to run check_sql on")
    sql_values = _run_check_sql(scenario, files)
    for spec in scenario.metrics:
        compare_values(scenario, spec, values[spec.name], sql_values[spec.name])
    if scenario.check_python:
        printed = _run_check_python(scenario, files)
        for spec in scenario.metrics:
            compare_values(scenario, spec, values[spec.name], printed[spec.name], "check_python")
    return {name: _canonical(values[name]) for name in sorted(values)}


def computed_reference(scenario: Scenario, world: World, files: DatasetFiles) -> Mapping[str, Any]:
    """References computed now, for data that has no committed references (the real Olist
    release a user loaded): the oracle's values, cross-checked by the check query as at build
    time. Called only after the analyst has answered."""
    if not scenario.answerable:
        return {}
    rebound = scenario.model_copy(
        update={"dataset": scenario.dataset.model_copy(update={"world": world.name})}
    )
    return checked_values(rebound, world, files)
