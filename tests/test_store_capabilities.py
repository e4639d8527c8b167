"""Stores declare what they can do (`stores.capabilities`); the harness decides from the
declaration, an unsupported combination is one usage error naming the store and the
capability, and `backintel stores` prints every declaration as a table."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from pytest_backintel.cli.commands import main
from pytest_backintel.evidence.probe import Probes
from stores.base import DatasetFiles, Store
from stores.capabilities import (
    CAPABILITY_DOCS,
    StoreCapabilities,
    UnsupportedCapability,
    require,
)
from stores.registry import (
    available_sources,
    available_stores,
    load_source_class,
    load_store_class,
)


def _stores_json(capsys: pytest.CaptureFixture[str]) -> list[dict[str, str]]:
    assert main(["stores", "--json"]) == 0
    rows: list[dict[str, str]] = json.loads(capsys.readouterr().out)
    return rows


def test_backintel_stores_lists_every_store_with_its_declaration(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = {r["store"]: r for r in _stores_json(capsys)}
    names = set(available_stores()) | {f"{k} source" for k in available_sources()}
    assert set(rows) == names
    for name in available_stores():
        declared = dict(load_store_class(name).capabilities.rows())
        assert {k: rows[name][k] for k in declared} == declared
    assert rows["sqlite"]["in_place"] == "no"
    assert rows["sqlite source"]["in_place"] == "yes"
    assert rows["postgres source"]["perturbation"] == "views"
    assert rows["postgres"]["server"] == "PostgreSQL"
    assert rows["duckdb"]["server"] == "-"


def test_the_table_has_a_column_and_a_legend_per_capability(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["stores"]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert header == ["store", *CAPABILITY_DOCS]
    for name, doc in CAPABILITY_DOCS.items():
        assert f"{name}: {doc}" in out
    assert any(line.startswith("clickhouse-server ") for line in out.splitlines())


def test_every_capability_is_documented() -> None:
    assert [name for name, _ in StoreCapabilities().rows()] == list(CAPABILITY_DOCS)


def test_a_copying_store_asked_to_serve_a_source_in_place_is_one_usage_error(
    tmp_path: Path,
) -> None:
    with pytest.raises(UnsupportedCapability, match=r"store 'duckdb' does not support in_place"):
        load_store_class("duckdb").for_source(tmp_path, str(tmp_path / "x.duckdb"))
    source = load_source_class("sqlite").for_source(tmp_path / "w", str(tmp_path / "x.sqlite"))
    assert source.capabilities.in_place


def test_require_names_the_store_the_capability_and_both_values() -> None:
    caps = load_store_class("postgres").capabilities
    require("postgres", caps, "denies_grants", True)  # declared: no error
    with pytest.raises(UnsupportedCapability) as info:
        require("postgres", caps, "sandbox_mount", "file")
    assert str(info.value).startswith(
        "store 'postgres' does not support sandbox_mount='file' (it declares sandbox_mount='none')"
    )


def test_a_store_written_before_capabilities_gets_them_from_its_old_attributes() -> None:
    """Upgrade: a third-party store that set only `dialect` and `denies_grants` keeps
    working, and its declaration says what it set."""

    class OldStore(Store):
        name = "old"
        dialect = "duckdb"
        denies_grants = True

        def provision(self, dataset: DatasetFiles) -> object:  # type: ignore[override]
            raise NotImplementedError

    assert OldStore.capabilities.dialect == "duckdb"
    assert OldStore.capabilities.denies_grants
    assert OldStore.capabilities.perturbation == "copy"  # the default, like every copy


def test_the_declared_dialect_is_the_dialect() -> None:
    for name in available_stores():
        cls = load_store_class(name)
        assert cls.dialect == cls.capabilities.dialect, name
        assert cls.denies_grants == cls.capabilities.denies_grants, name


def _sqlite_source(tmp_path: Path) -> tuple[Path, DatasetFiles]:
    path = tmp_path / "shop.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE orders (order_id INTEGER PRIMARY KEY, total REAL)")
    con.executemany("INSERT INTO orders VALUES (?, ?)", [(i, i * 1.5) for i in range(20)])
    con.commit()
    con.close()
    return path, DatasetFiles("shop", parquet_dir=path, sqlite_path=path)


def test_the_evidence_stage_serves_views_only_when_the_store_declares_them(
    tmp_path: Path,
) -> None:
    """The same SQLite source store: declared `views`, the probe is planned as views over
    the source; declared `copy`, it is not (the probe is then a perturbed copy)."""
    path, files = _sqlite_source(tmp_path)
    cls = load_source_class("sqlite")
    views = cls.for_source(tmp_path / "v", str(path))
    probes = Probes(lambda: tmp_path / "cache")
    planned = probes._view_plan(views, files, "sqlite")
    assert planned is not None
    _kind, plans, _notes = planned
    assert plans["orders"].key == ["order_id"]

    class CopyingSource(cls):  # type: ignore[valid-type,misc]
        capabilities = StoreCapabilities(in_place=True, perturbation="copy")

    copying = CopyingSource.for_source(tmp_path / "c", str(path))
    assert probes._view_plan(copying, files, "sqlite") is None
