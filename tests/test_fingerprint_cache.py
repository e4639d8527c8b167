"""Logical fingerprints kept on disk by physical hash (`stores.common.fingerprint_cache`): a
later process (here: an emptied in-process cache) reads the value kept; an entry that does not
parse, or names another physical hash, is ignored, computed again and rewritten."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stores.base import DatasetFiles, ProvisionedStore
from stores.common.fingerprint_cache import cache_folder, use_folder
from stores.engine.common import _LOGICAL_CACHE
from stores.engine.views import build_view_catalog
from stores.files.lake import LakeParquetStore


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[tuple[LakeParquetStore, DatasetFiles]]:
    """A lake-parquet store of one small dataset, its fingerprints kept under the test's folder."""
    parquet = tmp_path / "parquet"
    parquet.mkdir()
    pq.write_table(pa.table({"id": [1, 2, 3], "name": ["a", None, ""]}), parquet / "t.parquet")
    store = LakeParquetStore(tmp_path / "work")
    store.setup_session()
    kept = cache_folder()
    use_folder(tmp_path / "fingerprints")
    try:
        yield store, DatasetFiles(name="tiny", parquet_dir=parquet)
    finally:
        store.teardown_session()
        use_folder(kept)


@pytest.fixture
def item(lake: tuple[LakeParquetStore, DatasetFiles]) -> Iterator[ProvisionedStore]:
    provisioned = lake[0].provision(lake[1])
    try:
        yield provisioned
    finally:
        provisioned.teardown()


def entry_of(tmp_path: Path) -> Path:
    [entry] = (tmp_path / "fingerprints").glob("*.json")
    return entry


def test_a_new_process_reads_the_kept_fingerprint(item: ProvisionedStore, tmp_path: Path) -> None:
    first = item.fingerprint()
    entry = entry_of(tmp_path)
    assert json.loads(entry.read_text())["logical"] == first.logical
    _LOGICAL_CACHE.clear()  # what a new process starts with
    assert item.fingerprint() == first
    kept = json.loads(entry.read_text())
    kept["logical"] = "0" * 64
    entry.write_text(json.dumps(kept))
    _LOGICAL_CACHE.clear()
    assert item.fingerprint().logical == "0" * 64, "the entry on disk was not read"


@pytest.mark.parametrize(
    "damage",
    [
        "{not json",
        json.dumps({"physical": "f" * 64, "method": "?", "logical": "0" * 64}),
        json.dumps({"logical": "not a digest"}),
    ],
)
def test_a_damaged_entry_is_computed_again_and_rewritten(
    item: ProvisionedStore, tmp_path: Path, damage: str
) -> None:
    first = item.fingerprint()
    entry = entry_of(tmp_path)
    good = entry.read_text()
    entry.write_text(damage)
    _LOGICAL_CACHE.clear()
    assert item.fingerprint() == first
    assert json.loads(entry.read_text()) == json.loads(good)


def test_items_of_one_dataset_share_the_entry_and_a_change_misses(
    lake: tuple[LakeParquetStore, DatasetFiles], tmp_path: Path
) -> None:
    """Each item's catalog names its own folder (so no two items share their bytes); the entry
    is keyed by what the views read, so a second item reads the first one's, and an item whose
    data changed does not."""
    first, second = lake[0].provision(lake[1]), lake[0].provision(lake[1])
    try:
        one = first.fingerprint()
        _LOGICAL_CACHE.clear()
        two = second.fingerprint()
        assert two.physical != one.physical
        assert two.logical == one.logical
        assert entry_of(tmp_path)  # one entry, read by the second item, not a second one
        target = second.root / "data" / "t.parquet"
        target.chmod(0o644)
        pq.write_table(pa.table({"id": [1, 2, 3], "name": ["a", None, None]}), target)
        changed = second.fingerprint()
        assert changed.logical != one.logical
        assert len(list((tmp_path / "fingerprints").glob("*.json"))) == 2
        catalog = first.root / "catalog.duckdb"  # a catalog that is not the one built
        catalog.chmod(0o644)
        catalog.unlink()
        build_view_catalog(catalog, {"t": "SELECT 1 AS id"})
        assert first.fingerprint().logical != one.logical
        assert len(list((tmp_path / "fingerprints").glob("*.json"))) == 3
    finally:
        first.teardown()
        second.teardown()
