"""`backintel validate [PATH...]`: every problem of scenario files and folders, each with
`file:line`, found without running an analyst.

Reported: schema errors (unknown fields, wrong types), duplicate ids, unknown worlds and store
backends, missing sources, check queries (and reference queries) that do not parse in the
SQLite dialect (sqlglot), and, for sources of your own, queries that do not run on a copy of
the bound source, reference queries whose columns are not the metrics' names, answerable
scenarios whose reference is missing from, or stale in, the lock file, and locked values that
do not fit their metric's kind (a count is an integer; currency, ratio and duration are
numbers; text is a string; a table is rows with the declared columns).
With `--world-queries`, queries of scenarios bound to registered worlds are run on
those worlds too (each world's data is built first).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import sqlglot
from sqlglot.errors import ParseError

from pytest_backintel.collect.loading import (
    ScenarioFileError,
    line_of,
    load_scenario_file,
    where,
)
from pytest_backintel.collect.lockfile import LockError, check_columns, check_values, reference_for
from pytest_backintel.collect.user_data import (
    DEFAULT_STORE,
    NATIVE,
    UserSource,
    check_world,
    closest,
    user_source,
)
from pytest_backintel.collect.worlds import data_dir, get_world
from pytest_backintel.evidence.dialects import translate
from pytest_backintel.scenario import Scenario
from stores.base import ProvisionedStore, Store
from stores.registry import available_stores

__all__ = ["scenario_paths", "validate_paths"]

_SKIP = {"site-packages", "node_modules", "__pycache__", "results"}


def scenario_paths(paths: list[Path]) -> Iterator[Path]:
    """Files as given; folders searched for `*.scenario.yaml` (hidden folders left out)."""
    for path in paths:
        if path.is_dir():
            for found in sorted(path.rglob("*.scenario.yaml")):
                rel = found.relative_to(path).parts[:-1]
                if not any(p.startswith(".") or p in _SKIP for p in rel):
                    yield found
        else:
            yield path


class _Copies:
    """One pristine copy per source (or world and backend), shared by its scenarios."""

    def __init__(self, stack: ExitStack, worlds: bool) -> None:
        self._stack = stack
        self.worlds = worlds
        self._items: dict[str, tuple[Store, ProvisionedStore, str]] = {}

    def world(self, scenario: Scenario) -> tuple[Store, ProvisionedStore]:
        """A copy of the scenario's registered world on the backend it binds (else sqlite)."""
        from pytest_backintel.collect.backends import bound_store, store_spec

        binding = scenario.dataset
        key = f"{binding.world}/{binding.snapshot}@{store_spec(scenario, DEFAULT_STORE)}"
        if key not in self._items:
            world = get_world(binding.world)
            files = world.ensure_built(data_dir(Path.cwd()), snapshot=binding.snapshot)
            tmp = Path(self._stack.enter_context(tempfile.TemporaryDirectory()))
            store = bound_store(scenario, DEFAULT_STORE, tmp / "store")  # its caches: in tmp
            store.setup_session()
            self._stack.callback(store.teardown_session)
            item = store.provision(files)
            self._stack.callback(item.teardown)
            self._items[key] = (store, item, "")
        return self._items[key][:2]

    def get(self, source: UserSource) -> tuple[Store, ProvisionedStore, str]:
        if source.key not in self._items:
            files = source.ensure_built(data_dir(Path.cwd()))  # caches: the data folder's
            tmp = Path(self._stack.enter_context(tempfile.TemporaryDirectory()))
            store = source.make_store(NATIVE[source.kind], tmp / "store")
            store.setup_session()
            self._stack.callback(store.teardown_session)
            item = store.provision(files)
            self._stack.callback(item.teardown)
            self._items[source.key] = (store, item, item.fingerprint().logical)
        return self._items[source.key]


def _queries(scenario: Scenario) -> list[tuple[tuple[str, ...], str]]:
    out: list[tuple[tuple[str, ...], str]] = []
    ref_sql = scenario.reference.sql if scenario.reference else None
    if ref_sql:
        out.append((("reference", "sql"), ref_sql))
    if scenario.check_sql and scenario.check_sql != ref_sql:
        out.append((("check_sql",), scenario.check_sql))
    return out


def _problems(path: Path, scenario: Scenario, copies: _Copies) -> list[str]:
    found: list[str] = []
    store = scenario.dataset.store
    if store is not None and store.split(":", 1)[0] not in available_stores():
        name = store.split(":", 1)[0]
        found.append(
            f"{where(path, ('dataset', 'store'))}: dataset.store: unknown store backend {name!r}."
            f"{closest(name, available_stores())} Available: {', '.join(available_stores())}"
        )
    broken: set[tuple[str, ...]] = set()
    for loc, sql in _queries(scenario):
        try:
            sqlglot.parse(sql, read="sqlite")
        except ParseError as exc:
            broken.add(loc)
            first = exc.errors[0] if exc.errors else {}
            detail = first.get("description") or str(exc).splitlines()[0]
            at = f" (line {first.get('line')} of the query)" if first.get("line") else ""
            found.append(
                f"{path}:{line_of(path, loc)}: {'.'.join(loc)}: does not parse as SQL{at}: {detail}"
            )
    source = user_source(scenario.dataset)
    if source is None and not copies.worlds:
        return found
    binding = ("dataset", source.kind if source else "world")
    try:
        if source is None:
            backend, item = copies.world(scenario)
            data_hash, what = "", f"world {scenario.dataset.world}"
        else:
            backend, item, data_hash = copies.get(source)
            what = f"{source.kind} source"
    except Exception as exc:
        at = where(path, binding)
        return [*found, f"{at}: {'.'.join(binding)}: cannot provision the data: {exc}"]
    for loc, sql in _queries(scenario):
        if loc in broken:
            continue
        try:
            with item.connect() as session:
                result = session.run_sql(translate(sql, backend.dialect), max_rows=1)
        except Exception as exc:
            found.append(
                f"{path}:{line_of(path, loc)}: {'.'.join(loc)}: does not run on the bound "
                f"{what} ({backend.name}): {exc}"
            )
            continue
        if scenario.answerable and (why := check_columns(scenario, result.columns)):
            found.append(f"{path}:{line_of(path, loc)}: {'.'.join(loc)}: {why}")
    found += _scope_problems(path, scenario, item, what)
    if scenario.answerable and source is not None:
        try:
            values = reference_for(
                scenario,
                data_hash,
                method=source.fingerprint_method,
                rehash=source.older_data_hash,
            )
        except LockError as exc:
            loc = ("reference",) if scenario.reference else ("id",)
            found.append(f"{path}:{line_of(path, loc)}: reference: {exc}")
        else:
            for spot, problem in check_values(scenario, values):
                found.append(f"{path}:{line_of(path, spot)}: {_field(spot)}: {problem}")
    return found


def _field(loc: tuple[str | int, ...]) -> str:
    """`metrics[0].kind` for ("metrics", 0, "kind")."""
    return ".".join(f"[{p}]" if isinstance(p, int) else p for p in loc).replace(".[", "[")


def _scope_problems(path: Path, scenario: Scenario, item: ProvisionedStore, what: str) -> list[str]:
    """Every table (and column) a scope names must be in the bound data."""
    scope = scenario.scope
    if scope is None:
        return []
    with item.connect() as session:
        tables = {t.lower(): t for t in session.list_tables()}
        found = []
        entries = [("forbidden", i, e.table, e.columns) for i, e in enumerate(scope.forbidden)]
        entries += [("denied", i, e.table, []) for i, e in enumerate(scope.denied)]
        for field, i, table, columns in entries:
            at = f"{path}:{line_of(path, ('scope', field, i, 'table'))}: scope.{field}[{i}]"
            if table.lower() not in tables:
                found.append(
                    f"{at}: table {table!r} is not in the bound {what}. "
                    f"{closest(table, list(tables.values()))} Tables: {', '.join(sorted(tables))}"
                )
                continue
            have = {c.name.lower() for c in session.describe_table(tables[table.lower()]).columns}
            if missing := [c for c in columns if c.lower() not in have]:
                found.append(f"{at}: columns {missing} are not columns of {table!r}")
    return found


def validate_paths(paths: list[Path], *, world_queries: bool = False) -> list[str]:
    """Every problem found, `file:line: field: what is wrong`, in file order. With
    `world_queries`, check queries of scenarios bound to registered worlds run on them too
    (building each world's data first, under `data_dir`)."""
    problems: list[str] = []
    ids: dict[str, tuple[Path, int]] = {}
    with ExitStack() as stack:
        copies = _Copies(stack, world_queries)
        for path in scenario_paths(paths):
            if not path.is_file():
                problems.append(f"{path}:1: no such file")
                continue
            try:
                scenario = load_scenario_file(path)
            except ScenarioFileError as exc:
                problems.extend(str(exc).splitlines())
                continue
            line = line_of(path, ("id",))
            if scenario.id in ids:
                first, first_line = ids[scenario.id]
                problems.append(
                    f"{path}:{line}: id: {scenario.id!r} is already defined in {first}:{first_line}"
                )
            else:
                ids[scenario.id] = (path, line)
            try:
                check_world(path, scenario)
            except ScenarioFileError as exc:
                problems.extend(str(exc).splitlines())
                continue
            problems.extend(_problems(path, scenario, copies))
    return list(dict.fromkeys(problems))  # a suite file's problem once, not once per scenario
