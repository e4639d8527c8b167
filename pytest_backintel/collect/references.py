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

from pytest_backintel.collect.loading import load_scenario_file
from pytest_backintel.collect.lockfile import LOCK_NAME, LockError, read_lock, render_lock, spec_of
from pytest_backintel.collect.user_data import NATIVE, user_source
from pytest_backintel.collect.worlds import data_dir
from pytest_backintel.evidence.dialects import translate
from pytest_backintel.scenario import MetricKind, Scenario
from pytest_backintel.tolerance import compare_metric
from stores.base import ProvisionedStore

__all__ = [
    "ReferenceBuildError",
    "ReferenceData",
    "build_locks",
    "discover",
    "metric_values",
]

SKIP_DIRS = {"site-packages", "node_modules", "__pycache__", "results"}
UNCAPPED = 10**9


class ReferenceBuildError(Exception):
    """A reference could not be computed, or two references of one scenario disagree."""


@dataclass(frozen=True)
class ReferenceData:
    """What a `reference.python` function is given: a pristine, read-only copy."""

    kind: str
    """`sqlite`, `duckdb`, `parquet`, `csv` or `postgres`."""
    path: Path | None
    """The copy's file or folder (None for PostgreSQL)."""
    store: ProvisionedStore

    def query(self, sql: str) -> list[dict[str, Any]]:
        """Every row of one read-only query, as dicts (in the store's own SQL dialect)."""
        with self.store.connect() as session:
            return session.run_sql(sql, max_rows=UNCAPPED).records()


def discover(roots: list[Path]) -> Iterator[tuple[Path, Scenario]]:
    """Every `*.scenario.yaml` under `roots` (hidden folders, virtualenvs and run results
    left out), in path order."""
    seen: set[Path] = set()
    for root in roots:
        paths = [root] if root.is_file() else sorted(root.rglob("*.scenario.yaml"))
        for path in paths:
            rel = path.relative_to(root).parts[:-1] if path != root else ()
            if any(p.startswith(".") or p in SKIP_DIRS for p in rel):
                continue
            if path.resolve() not in seen:
                seen.add(path.resolve())
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
    if tables:
        return {tables[0].name: [{k: _plain(v) for k, v in r.items()} for r in rows]}
    if len(rows) != 1:
        raise ReferenceBuildError(f"{what} returned {len(rows)} rows; scalar metrics need one")
    missing = [m.name for m in scenario.metrics if m.name not in rows[0]]
    if missing:
        raise ReferenceBuildError(f"{what} has no column for metric(s) {missing}")
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
        raise ReferenceBuildError(f"reference.python {target!r}: cannot load it: {exc}") from exc
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
                raise ReferenceBuildError(f"{what} failed: {exc}") from exc
            out[what] = metric_values(scenario, rows, what)
    if ref is not None and ref.python:
        func = _python_function(ref.python, root)
        try:
            got = func(ReferenceData(kind, item.mount_path, item))
        except Exception as exc:
            raise ReferenceBuildError(f"reference.python {ref.python} raised {exc!r}") from exc
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


def compute_entry(path: Path, scenario: Scenario, root: Path) -> dict[str, Any]:
    """One lock entry: the values, the data hash and the spec, computed on a fresh copy."""
    source = user_source(scenario.dataset)
    assert source is not None
    files = source.ensure_built(data_dir(root))
    with tempfile.TemporaryDirectory(prefix="backintel-refs-") as tmp:
        store = source.make_store(NATIVE[source.kind], Path(tmp))
        store.setup_session()
        try:
            item = store.provision(files)
            try:
                data_hash = item.fingerprint().logical
                found = _candidates(scenario, item, store.dialect, source.kind, root)
            finally:
                item.teardown()
        finally:
            store.teardown_session()
    if not found:
        raise ReferenceBuildError("no reference: give `reference: {sql|values|python}`")
    return {
        "version": scenario.version,
        "file": path.name,
        "dataset": f"{source.kind}:{scenario.dataset.source}",
        "data_hash": data_hash,
        "spec": spec_of(scenario),
        "computed_by": next(iter(found)),
        "values": _agree(scenario, found),
    }


def build_locks(roots: list[Path], *, check: bool, root: Path) -> tuple[list[str], list[str]]:
    """Write (or with `check`, compare) the lock file of every folder of user-bound scenarios
    under `roots`. Returns (what was done, per lock file; problems, each naming a file)."""
    folders: dict[Path, dict[str, dict[str, Any]]] = {}
    problems: list[str] = []
    for path, scenario in discover(roots):
        if scenario.dataset.source_kind is None or not scenario.answerable:
            continue
        entries = folders.setdefault(path.resolve().parent, {})
        if scenario.id in entries:
            problems.append(f"{path}: scenario id {scenario.id!r} appears twice in this folder")
            continue
        try:
            entries[scenario.id] = compute_entry(path, scenario, root)
        except Exception as exc:
            problems.append(f"{path}: scenario {scenario.id!r}: {exc}")
    if problems:
        return [], problems
    done: list[str] = []
    for folder, entries in sorted(folders.items()):
        lock = folder / LOCK_NAME
        text = render_lock(entries)
        current = lock.read_text(encoding="utf-8") if lock.exists() else None
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
