"""A data probe's perturbed copy comes with a SQLite file only for a store that reads one
(`StoreCapabilities.reads_sqlite_file`): the sqlite backend gets it, written once per machine;
DuckDB, which reads the Parquet files, is spared writing it. A copy built without it gets it
added when a store that reads it asks, with the same rows as a copy built with it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from pytest_backintel.evidence.perturb import SQLITE_FILE, perturb_dataset
from pytest_backintel.evidence.probe_build import probe_store
from scenarios.olist.config import OlistConfig
from scenarios.olist.world import OlistWorld
from stores.base import DatasetFiles
from stores.duckdb.store import DuckDBStore
from stores.sqlite.store import SQLiteStore


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> DatasetFiles:
    files = OlistWorld(OlistConfig(seed=3, orders=120)).ensure_built(tmp_path_factory.mktemp("w"))
    assert files.sqlite_path is not None
    return files


def _rows(path: Path) -> dict[str, list[tuple[object, ...]]]:
    with sqlite3.connect(path) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type='table'")]
        return {n: conn.execute(f'SELECT * FROM "{n}" ORDER BY rowid').fetchall() for n in names}


def test_only_a_store_that_reads_a_sqlite_file_gets_one_with_the_copy(
    world: DatasetFiles, tmp_path: Path
) -> None:
    assert SQLiteStore.capabilities.reads_sqlite_file
    assert not DuckDBStore.capabilities.reads_sqlite_file
    duck, lite = DuckDBStore(tmp_path / "duck"), SQLiteStore(tmp_path / "lite")
    try:
        store, _ = probe_store(duck, world, tmp_path / "copies", 1, None, None, None)
        copies = [p for p in (tmp_path / "copies").iterdir() if p.is_dir()]
        assert len(copies) == 1
        assert not (copies[0] / SQLITE_FILE).exists(), "DuckDB reads the Parquet files"
        store.teardown()
        store, _ = probe_store(lite, world, tmp_path / "copies", 1, None, None, None)
        assert (copies[0] / SQLITE_FILE).is_file(), "added for the sqlite backend"
        with store.connect() as session:
            assert session.run_sql("SELECT COUNT(*) FROM orders").rows[0][0] > 0
        store.teardown()
    finally:
        duck.teardown_session()
        lite.teardown_session()


def test_a_sqlite_file_added_later_holds_what_one_built_with_the_copy_holds(
    world: DatasetFiles, tmp_path: Path
) -> None:
    first = perturb_dataset(world, tmp_path / "later", 2, sqlite=False)
    assert first.sqlite_path is None
    added = perturb_dataset(world, tmp_path / "later", 2, sqlite=True)
    built = perturb_dataset(world, tmp_path / "with", 2, sqlite=True)
    assert added.sqlite_path is not None
    assert built.sqlite_path is not None
    assert _rows(added.sqlite_path) == _rows(built.sqlite_path)
    again = perturb_dataset(world, tmp_path / "later", 2, sqlite=False)
    assert again.sqlite_path == added.sqlite_path, "a copy that has one keeps offering it"
