"""Store backends for a session: one set up per backend spec, on first use.

A scenario runs on `--store` unless its dataset binding names the store it needs (the
cross-store level binds `multi:postgres:olist_orders+sqlite:olist_catalog`; the scale level
binds `lake-parquet`).
"""

from __future__ import annotations

import difflib
import os
import re
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import pytest

from pytest_backintel.collect.user_data import (
    binding_problem,
    bound_folder,
    source_store_spec,
    user_source,
)
from pytest_backintel.scenario import Scenario
from stores.base import Store
from stores.registry import UnknownStoreError, available_stores, load_store_class

__all__ = [
    "StoreBackends",
    "bound_store",
    "check_stores",
    "store_spec",
    "unmeasurable_on",
]


def store_spec(scenario: Scenario, default: str) -> str:
    """The backend spec a scenario runs on (a source of your own: see `user_data`)."""
    if scenario.dataset.source_kind is not None:
        return source_store_spec(scenario.dataset, default)
    return scenario.dataset.store or default


def unmeasurable_on(scenario: Scenario, spec: str) -> str | None:
    """Why the backend `spec` cannot measure `scenario`, said at collection (None: it can).
    A denied grant needs a store that declares it withholds a read grant
    (`capabilities.denies_grants`)."""
    denied = scenario.scope.denied_tables() if scenario.scope is not None else ()
    if not denied:
        return None
    name = spec.split(":", 1)[0]
    try:
        store = load_store_class(name)
    except UnknownStoreError:
        return None  # an unknown store is a usage error of its own
    if store.capabilities.denies_grants:
        return None
    able = ", ".join(s for s in available_stores() if _denies(s))
    return (
        f"not measured on --store {name}: it cannot withhold a read grant (it declares "
        f"denies_grants=False), which this "
        f"scenario's denied tables ({', '.join(denied)}) need; stores that can: {able}"
    )


def _denies(name: str) -> bool:
    try:
        return load_store_class(name).capabilities.denies_grants
    except Exception:  # a store whose optional dependency is missing cannot be asked
        return False


def backend_for(backends: StoreBackends, scenario: Scenario, default: str) -> Store:
    """The set-up backend `scenario` runs on (`default` unless it binds one): for data of your
    own, the store its source makes."""
    spec = store_spec(scenario, default)
    source = user_source(scenario.dataset)
    if source is not None:
        return backends.get_bound(spec, source.key, partial(source.make_store, spec))
    return backends.get(spec)


def bound_store(scenario: Scenario, default: str, workdir: Path) -> Store:
    """A backend (not yet set up) for one scenario outside a session, e.g. `backintel score`:
    its source's own store for data of your own, else the registered backend."""
    spec = store_spec(scenario, default)
    source = user_source(scenario.dataset)
    if source is not None:
        return source.make_store(spec, workdir)
    return load_store_class(spec)(workdir)


def check_stores(items: Sequence[pytest.Item], default: str) -> None:
    """One usage error for an unknown `--store` (closest match) or for sources of your own
    that `--store` cannot serve losslessly, before any item runs."""
    name = default.split(":", 1)[0]
    known = available_stores()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise pytest.UsageError(
            f"--store {default!r}: unknown store backend {name!r}.{hint} "
            f"Available: {', '.join(known)}."
        )
    problems: dict[str, str] = {}
    for item in items:
        scenario: Scenario | None = getattr(item, "scenario", None)
        if scenario is None or scenario.dataset.source_kind is None:
            continue
        problem = binding_problem(scenario.dataset, store_spec(scenario, default))
        if problem is not None:
            problems.setdefault(str(item.path), problem)
    if problems:
        lines = [f"{path}: {problem}" for path, problem in sorted(problems.items())]
        raise pytest.UsageError("\n".join(lines))


_WORKDIRS_IN_USE: Counter[Path] = Counter()
"""Per-process store folders and how many live `StoreBackends` of this process use each (a
`backintel score` run in-process beside a session shares its folder)."""


class StoreBackends:
    """Backends by spec, each set up once in this process and torn down at the end."""

    def __init__(self, data_dir: Callable[[], Path]) -> None:
        self._data_dir = data_dir
        self._stores: dict[str, Store] = {}
        self.changes: list[str] = []
        """What a source of your own found changed at the end of the run (`teardown`): a
        server database is hashed again there, without its per-trial cache."""

    def get(self, spec: str) -> Store:
        if spec not in self._stores:
            folder = re.sub(r"[^A-Za-z0-9_.-]+", "_", spec)
            workdir = self._data_dir() / "stores" / folder / f"{os.getpid()}"
            try:
                store = load_store_class(spec)(workdir)
            except UnknownStoreError as exc:
                raise pytest.UsageError(str(exc)) from exc
            store.setup_session()
            _WORKDIRS_IN_USE[store.workdir] += 1
            self._stores[spec] = store
        return self._stores[spec]

    def is_set_up(self, spec: str) -> bool:
        """Whether backend `spec` is set up already (a thread that may end soon must not set
        one up: a server it starts dies with the thread that started it)."""
        return spec in self._stores

    def get_bound(self, spec: str, source: str, make: Callable[[Path], Store]) -> Store:
        """The backend `spec` serving one source of your own (`make(workdir)` builds it)."""
        key = f"{spec}@{source}"
        if key not in self._stores:
            store = make(bound_folder(self._data_dir(), spec, source) / f"{os.getpid()}")
            store.setup_session()
            _WORKDIRS_IN_USE[store.workdir] += 1
            self._stores[key] = store
        return self._stores[key]

    def teardown(self) -> list[Path]:
        """Tear every backend down; the per-process folders no other live `StoreBackends` of
        this process uses, for the caller to remove."""
        stores, self._stores = self._stores, {}
        unused = []
        for store in stores.values():
            store.teardown_session()
            self.changes += getattr(store, "changes", [])
            _WORKDIRS_IN_USE[store.workdir] -= 1
            if _WORKDIRS_IN_USE[store.workdir] <= 0:
                del _WORKDIRS_IN_USE[store.workdir]
                unused.append(store.workdir)
        return unused
