"""Store backends for a session: one set up per backend spec, on first use.

A scenario runs on `--store` unless its dataset binding names the store it needs (the
cross-store level binds `multi:postgres:olist_orders+sqlite:olist_catalog`; the scale level
binds `lake-parquet`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_backintel.scenario import Scenario
from stores.base import Store
from stores.registry import UnknownStoreError, load_store_class

__all__ = ["StoreBackends", "store_spec"]


def store_spec(scenario: Scenario, default: str) -> str:
    """The backend spec a scenario runs on."""
    return scenario.dataset.store or default


class StoreBackends:
    """Backends by spec, each set up once in this process and torn down at the end."""

    def __init__(self, data_dir: Callable[[], Path]) -> None:
        self._data_dir = data_dir
        self._stores: dict[str, Store] = {}

    def get(self, spec: str) -> Store:
        if spec not in self._stores:
            folder = re.sub(r"[^A-Za-z0-9_.-]+", "_", spec)
            workdir = self._data_dir() / "stores" / folder / f"{os.getpid()}"
            try:
                store = load_store_class(spec)(workdir)
            except UnknownStoreError as exc:
                raise pytest.UsageError(str(exc)) from exc
            store.setup_session()
            self._stores[spec] = store
        return self._stores[spec]

    def teardown(self) -> None:
        stores, self._stores = self._stores, {}
        for store in stores.values():
            store.teardown_session()
