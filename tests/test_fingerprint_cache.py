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
from stores.files.lake import LakeParquetStore


@pytest.fixture
def item(tmp_path: Path) -> Iterator[ProvisionedStore]:
    parquet = tmp_path / "parquet"
    parquet.mkdir()
    pq.write_table(pa.table({"id": [1, 2, 3], "name": ["a", None, ""]}), parquet / "t.parquet")
    store = LakeParquetStore(tmp_path / "work")
    store.setup_session()
    kept = cache_folder()
    use_folder(tmp_path / "fingerprints")
    provisioned = store.provision(DatasetFiles(name="tiny", parquet_dir=parquet))
    try:
        yield provisioned
    finally:
        provisioned.teardown()
        store.teardown_session()
        use_folder(kept)


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
