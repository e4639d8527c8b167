"""TPC-H's SQLite file is written when something first reads it, not with every build: a run
whose store reads only the Parquet files (`lake-parquet`, DuckDB) never writes it, a run on
the sqlite store writes it once, and what `with_sqlite` writes later is what a build with it
holds (`ensure_built`, which `backintel data build` and the reference checks use)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from pytest_backintel.collect.loading import DEFINITIONS_DIR
from scenarios.tpch.world import TpchWorld

SCENARIO = DEFINITIONS_DIR / "level7" / "l7-q6-forecast-revenue-change.scenario.yaml"


def _contents(path: Path) -> list[Any]:
    con = sqlite3.connect(path)
    try:
        out: list[Any] = con.execute(
            "SELECT type, name, sql FROM sqlite_master ORDER BY 2"
        ).fetchall()
        for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            out.append(con.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall())
        return out
    finally:
        con.close()


def test_the_parquet_files_alone_then_the_sqlite_file_as_a_whole_build_writes_it(
    tmp_path: Path,
) -> None:
    world = TpchWorld()
    files = world.ensure_parquet(tmp_path / "later", "sf0.01")
    assert files.sqlite_path is None
    assert not (files.parquet_dir.parent / "tpch.sqlite").exists()
    assert world.ensure_parquet(tmp_path / "later", "sf0.01").sqlite_path is None
    folder = files.parquet_dir.parent
    (folder / ".tpch.sqlite.tmp-1").write_text("a killed writer's")
    (folder / "spill-1").mkdir()
    added = world.with_sqlite(files)
    left = [*folder.glob(".tpch.sqlite.tmp-*"), *folder.glob("spill-*")]
    assert left == [], "what a killed writer left is removed"
    assert added.sqlite_path == files.parquet_dir.parent / "tpch.sqlite"
    written = added.sqlite_path.stat().st_mtime_ns
    assert world.with_sqlite(world.ensure_parquet(tmp_path / "later", "sf0.01")) == added
    assert added.sqlite_path.stat().st_mtime_ns == written, "written once"
    whole = world.ensure_built(tmp_path / "whole", "sf0.01")
    assert whole.sqlite_path is not None
    assert _contents(added.sqlite_path) == _contents(whole.sqlite_path)
    assert world.data_hash(added) == world.data_hash(whole)


@pytest.mark.parametrize(("store", "written"), [("lake-parquet", False), ("sqlite", True)])
def test_a_run_writes_the_sqlite_file_only_for_a_store_that_reads_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, store: str, written: bool
) -> None:
    data = pytester.path / "data"
    monkeypatch.setenv("BACKINTEL_DATA_DIR", str(data))
    monkeypatch.setenv("BACKINTEL_TPCH_SF", "0.01")
    for name in [n for n in os.environ if n.startswith(("OPENAI_", "ANTHROPIC_"))]:
        monkeypatch.delenv(name)
    text = SCENARIO.read_text().replace("store: lake-parquet", f"store: {store}")
    assert f"store: {store}" in text
    scenario = pytester.path / SCENARIO.name
    scenario.write_text(text)
    run = pytester.runpytest_subprocess(
        str(scenario), "--results-dir", str(pytester.path / "results"),
        "-p", "no:cacheprovider", "-p", "no:xdist",
    )  # fmt: skip
    run.assert_outcomes(passed=1)
    assert (data / "worlds" / "tpch-sf0.01" / "parquet" / "lineitem.parquet").is_file()
    assert (data / "worlds" / "tpch-sf0.01" / "tpch.sqlite").is_file() is written
