"""`backintel references build`: the references of a user's suites, computed on pristine
copies of their sources and written to the lock file beside the scenarios.

Scenarios are discovered under the given folders (default: the current directory). For each
answerable scenario bound to a source of your own, every reference it gives is computed on a
fresh copy of the source on its native backend: `reference.sql` and `check_sql` run there
(translated from the SQLite dialect), `reference.python` is called with a `ReferenceData`,
`reference.values` are taken as written. All of them must agree metric by metric under the
metric's tolerance, or the build stops naming the file. Scenarios bound to a registered world
take their references from that world and are left alone.
"""

from __future__ import annotations

import importlib
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from pytest_backintel.collect.loading import ScenarioFileError, line_of, load_scenario_file, where
from pytest_backintel.collect.lock_upgrade import upgrade_lines
from pytest_backintel.collect.lockfile import (
    LOCK_NAME,
    LockError,
    check_columns,
    check_values,
    data_files,
    no_file,
    read_lock,
    render_lock,
    spec_of,
)
from pytest_backintel.collect.prediction_refs import PredictionReferenceError, calibrate, own_cohort
from pytest_backintel.collect.suites import rebound
from pytest_backintel.collect.user_data import NATIVE, check_world, user_source
from pytest_backintel.collect.worlds import data_dir
from pytest_backintel.evidence.dialects import translate
from pytest_backintel.scenario import MetricKind, Scenario
from pytest_backintel.tolerance import compare_metric
from stores.base import DatasetFiles, ProvisionedStore
from stores.common.dsn import redact

__all__ = [
    "ReferenceBuildError",
    "ReferenceData",
    "build_locks",
    "discover",
    "merge_binding",
    "metric_values",
    "scenario_files",
]

SKIP_DIRS = {"site-packages", "node_modules", "__pycache__", "results"}
UNCAPPED = 10**9


class ReferenceBuildError(Exception):
    """A reference could not be computed, or two references of one scenario disagree; `loc`
    is where in the scenario file (a YAML location, for its line)."""

    def __init__(self, message: str, loc: tuple[str | int, ...] = ("reference",)) -> None:
        super().__init__(message)
        self.loc = loc


@dataclass(frozen=True)
class ReferenceData:
    """What a `reference.python` function is given: a pristine, read-only copy."""

    kind: str
    """`sqlite`, `duckdb`, `parquet`, `csv`, `postgres` or `clickhouse`."""
    path: Path | None
    """The copy's file or folder (None for PostgreSQL and ClickHouse)."""
    store: ProvisionedStore

    def query(self, sql: str) -> list[dict[str, Any]]:
        """Every row of one read-only query, as dicts (in the store's own SQL dialect)."""
        with self.store.connect() as session:
            return session.run_sql(sql, max_rows=UNCAPPED).records()


def scenario_files(roots: list[Path]) -> Iterator[Path]:
    """Every `*.scenario.yaml` under `roots` (hidden folders, virtualenvs and run results
    left out), in path order, each once."""
    seen: set[Path] = set()
    for root in roots:
        paths = [root] if root.is_file() else sorted(root.rglob("*.scenario.yaml"))
        for path in paths:
            rel = path.relative_to(root).parts[:-1] if path != root else ()
            if any(p.startswith(".") or p in SKIP_DIRS for p in rel):
                continue
            if path.resolve() not in seen:
                seen.add(path.resolve())
                yield path


def discover(roots: list[Path]) -> Iterator[tuple[Path, Scenario]]:
    """Every scenario under `roots`, loaded (`ScenarioFileError` for an invalid file)."""
    for path in scenario_files(roots):
        yield path, load_scenario_file(path)


def _plain(cell: Any) -> Any:
    if isinstance(cell, bool):
        return int(cell)
    if isinstance(cell, Decimal):
        return int(cell) if cell == cell.to_integral_value() else float(cell)
    if isinstance(cell, datetime | date):
        return cell.isoformat()
    if isinstance(cell, bytes):
        return cell.hex()
    return cell


def metric_values(scenario: Scenario, rows: list[dict[str, Any]], what: str) -> dict[str, Any]:
    """Metric values from a query's rows: one table metric takes them all, else one row with
    a column per metric."""
    tables = [m for m in scenario.metrics if m.kind is MetricKind.TABLE]
    loc = tuple(what.split("."))
    if tables and rows and (why := check_columns(scenario, list(rows[0]))):
        raise ReferenceBuildError(f"{what} {why}", loc)
    if tables:
        return {tables[0].name: [{k: _plain(v) for k, v in r.items()} for r in rows]}
    if len(rows) != 1:
        raise ReferenceBuildError(
            f"{what} returned {len(rows)} rows; scalar metrics need exactly one", loc
        )
    if why := check_columns(scenario, list(rows[0])):
        raise ReferenceBuildError(f"{what} {why}", loc)
    return {m.name: _plain(rows[0][m.name]) for m in scenario.metrics}


def _python_function(target: str, root: Path) -> Callable[[ReferenceData], Mapping[str, Any]]:
    module_name, _, attr = target.partition(":")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        func: Callable[[ReferenceData], Mapping[str, Any]] = getattr(
            importlib.import_module(module_name), attr
        )
    except (ImportError, AttributeError) as exc:
        raise ReferenceBuildError(
            f"reference.python {target!r}: cannot load it: {exc}", ("reference", "python")
        ) from exc
    return func


def _candidates(
    scenario: Scenario, item: ProvisionedStore, dialect: str, kind: str, root: Path
) -> dict[str, dict[str, Any]]:
    """Each reference the scenario gives, by where it came from."""
    ref = scenario.reference
    out: dict[str, dict[str, Any]] = {}
    queries = {"reference.sql": ref.sql if ref else None, "check_sql": scenario.check_sql}
    if queries["check_sql"] == queries["reference.sql"]:
        del queries["check_sql"]
    for what, sql in queries.items():
        if sql:
            data = ReferenceData(kind, item.mount_path, item)
            try:
                rows = data.query(translate(sql, dialect))
            except Exception as exc:
                why = f"{exc}{no_file(scenario, str(exc))}"
                raise ReferenceBuildError(f"{what} failed: {why}", tuple(what.split("."))) from exc
            out[what] = metric_values(scenario, rows, what)
    if ref is not None and ref.python:
        func = _python_function(ref.python, root)
        try:
            got = func(ReferenceData(kind, item.mount_path, item))
        except Exception as exc:
            raise ReferenceBuildError(
                f"reference.python {ref.python} raised {exc!r}", ("reference", "python")
            ) from exc
        out["reference.python"] = {k: _plain(v) for k, v in dict(got).items()}
    if ref is not None and ref.values is not None:
        out["reference.values"] = dict(ref.values)
    return out


def _agree(scenario: Scenario, found: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The first reference's values, after checking every other one against it."""
    (first, values), *others = found.items()
    for metric in scenario.metrics:
        if metric.name not in values:
            raise ReferenceBuildError(f"{first} gives no value for metric {metric.name!r}")
        for what, other in others:
            got = other.get(metric.name)
            if not compare_metric(metric, values[metric.name], got).ok:
                raise ReferenceBuildError(
                    f"metric {metric.name!r}: {first} gives {values[metric.name]!r} but {what} "
                    f"gives {got!r}"
                )
    return {m.name: values[m.name] for m in scenario.metrics}


def _prediction_reference(
    scenario: Scenario, data: ReferenceData, dialect: str, files: DatasetFiles
) -> dict[str, dict[str, Any]]:
    """The hidden cohort of a prediction scenario from its labels file, the reference program
    checked on the data and on the shuffled copies (a SQLite source)."""
    from pytest_backintel.evidence.item_python import evidence_runner
    from pytest_backintel.sandbox.registry import create_provider

    assert scenario.check_python is not None
    code = scenario.check_python
    try:
        values = own_cohort(scenario, lambda sql: data.query(translate(sql, dialect)))
        if files.sqlite_path is None:
            return {"prediction.labels": values}
        with tempfile.TemporaryDirectory(prefix="backintel-sandbox-") as tmp:
            provider = create_provider(None, Path(tmp))
            provider.setup_session()
            try:
                runners = evidence_runner(lambda: provider)

                def run(path: Path) -> Mapping[str, Any]:
                    runner = runners(path, None)
                    assert runner is not None
                    try:
                        return runner(code)
                    except Exception as exc:
                        raise PredictionReferenceError(
                            f"the reference program (check_python) failed: {exc}",
                            ("check_python",),
                        ) from exc

                calibrate(scenario, values, files.sqlite_path, run)
            finally:
                provider.teardown_session()
    except PredictionReferenceError as exc:
        raise ReferenceBuildError(str(exc), exc.loc) from exc
    return {"prediction.labels": values}


def compute_entry(path: Path, scenario: Scenario, root: Path) -> dict[str, Any]:
    """One lock entry: the values, the data hash and the spec, computed on a fresh copy."""
    source = user_source(scenario.dataset)
    assert source is not None
    files = source.ensure_built(data_dir(root))
    with tempfile.TemporaryDirectory(prefix="backintel-refs-") as tmp:
        store = source.make_store(NATIVE[source.kind], Path(tmp) / "store")
        store.setup_session()
        try:
            item = store.provision(files)
            try:
                data_hash = item.fingerprint().logical
                if scenario.prediction is not None:
                    data = ReferenceData(source.kind, item.mount_path, item)
                    found = _prediction_reference(scenario, data, store.dialect, files)
                else:
                    found = _candidates(scenario, item, store.dialect, source.kind, root)
            finally:
                item.teardown()
        finally:
            store.teardown_session()
    if not found:
        raise ReferenceBuildError("no reference: give `reference: {sql|values|python}`", ("id",))
    return {
        "version": scenario.version,
        "file": path.name,
        "dataset": f"{source.kind}:{redact(scenario.dataset.source or '')}",
        "data_hash": data_hash,
        "fingerprint": source.fingerprint_method,
        "spec": spec_of(scenario),
        "computed_by": next(iter(found)),
        **data_files(scenario),
        "values": found["prediction.labels"] if scenario.prediction else _agree(scenario, found),
    }


def _entry_problems(path: Path, scenario: Scenario, root: Path) -> tuple[dict[str, Any], list[str]]:
    """One lock entry, or every problem with it as `file:line: field: what is wrong`."""
    try:
        check_world(path, scenario)
        entry = compute_entry(path, scenario, root)
    except ScenarioFileError as exc:
        return {}, str(exc).splitlines()
    except ReferenceBuildError as exc:
        at = ".".join(str(p) for p in exc.loc)
        return {}, [f"{path}:{line_of(path, exc.loc)}: {at}: scenario {scenario.id!r}: {exc}"]
    except Exception as exc:  # a source that cannot be read: the binding's line
        loc = ("dataset", scenario.dataset.source_kind or "world")
        return {}, [f"{where(path, loc)}: dataset: scenario {scenario.id!r}: {exc}"]
    found = []
    for spot, why in check_values(scenario, entry["values"]):
        name = ".".join(f"[{p}]" if isinstance(p, int) else p for p in spot).replace(".[", "[")
        found.append(f"{path}:{line_of(path, spot)}: {name}: {why}")
    return entry, found


def _old_entry(path: Path, scenario_id: str) -> dict[str, Any] | None:
    try:
        return read_lock(path.resolve().parent / LOCK_NAME).get(scenario_id)
    except LockError:
        return None


def _disagreement(scenario: Scenario, ours: dict[str, Any], theirs: dict[str, Any]) -> str | None:
    for metric in scenario.metrics:
        a, b = ours.get(metric.name), theirs.get(metric.name)
        if not compare_metric(metric, a, b).ok:
            return f"metric {metric.name!r}: {a!r:.80} here, {b!r:.80} there"
    return None


def merge_binding(
    scenario: Scenario, old: dict[str, Any] | None, new: dict[str, Any]
) -> dict[str, Any]:
    """The lock entry with `new` in its place: the suite's own binding replaces the entry
    (keeping the values locked for other bindings while the spec is unchanged); a binding
    rebound with `--dataset` is kept under `also`, beside the suite's own. Values locked for
    two bindings must agree under the metric's tolerance."""
    rebound_now = scenario.dataset.world in rebound()
    same_spec = old is not None and old.get("spec") == new["spec"]
    also = dict(old.get("also") or {}) if old is not None and same_spec else {}
    if not rebound_now:
        merged = {**new, "also": also} if also else new
        main = merged
    else:
        if old is None or not same_spec:
            raise ReferenceBuildError(
                f"scenario {scenario.id!r}: lock its suite's own binding first (run "
                "`backintel references build` without --dataset), then each other binding"
            )
        also[new["dataset"]] = {
            k: new[k] for k in ("data_hash", "fingerprint", "computed_by", "values")
        }
        main = {k: v for k, v in old.items() if k != "also"}
        merged = {**main, "also": dict(sorted(also.items()))}
    for label, other in also.items():
        if (why := _disagreement(scenario, main["values"], other.get("values") or {})) is not None:
            raise ReferenceBuildError(
                f"scenario {scenario.id!r}: the references on {main['dataset']} and on {label} "
                f"disagree ({why}); the same questions over two bindings need the same answers"
            )
    return merged


def build_locks(
    roots: list[Path], *, check: bool, root: Path, upgrade: bool = False
) -> tuple[list[str], list[str]]:
    """Write (or with `check`, compare) the lock file of every folder of user-bound scenarios
    under `roots`. Returns (what was done, per lock file; every problem, `file:line`). With
    `upgrade`, each scenario's values are also compared with the old lock's (`lock_upgrade`):
    a changed one is a problem."""
    folders: dict[Path, dict[str, dict[str, Any]]] = {}
    problems: list[str] = []
    for path in scenario_files(roots):
        try:
            scenario = load_scenario_file(path)
        except ScenarioFileError as exc:
            problems += str(exc).splitlines()
            continue
        if scenario.dataset.source_kind is None or not scenario.answerable:
            continue
        entries = folders.setdefault(path.resolve().parent, {})
        if scenario.id in entries:
            line = line_of(path, ("id",))
            problems.append(f"{path}:{line}: id: {scenario.id!r} appears twice in this folder")
            continue
        entry, found = _entry_problems(path, scenario, root)
        if not found:
            try:
                entry = merge_binding(scenario, _old_entry(path, scenario.id), entry)
            except ReferenceBuildError as exc:
                found = [f"{path}:{line_of(path, exc.loc)}: reference: {exc}"]
        problems += found
        if not found:
            entries[scenario.id] = entry
    if problems:
        return [], problems
    done: list[str] = []
    for folder, entries in sorted(folders.items()):
        lock = folder / LOCK_NAME
        text = render_lock(entries)
        current = lock.read_text(encoding="utf-8") if lock.exists() else None
        if upgrade:
            lines, changed = upgrade_lines(lock, entries)
            done += lines
            problems += [f"reference value changed: {line}" for line in changed]
        if check:
            if current != text:
                try:
                    old = read_lock(lock)
                except LockError:
                    old = {}
                stale = sorted(sid for sid, e in entries.items() if old.get(sid) != e)
                problems.append(f"{lock} is out of date for {', '.join(stale) or 'its layout'}")
            else:
                done.append(f"{lock}: {len(entries)} reference(s) up to date")
            continue
        lock.write_text(text, encoding="utf-8")
        done.append(f"wrote {lock}: {len(entries)} reference(s)")
    return done, problems
