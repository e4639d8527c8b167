"""TPC-H generation (scale factor snapshots, determinism, data hash) and the level-7 scenarios:
oracles against check_sql on SQLite and, translated, on a lake store; committed references."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import pytest

from pytest_backintel.evidence.dialects import translate
from pytest_backintel.tolerance import compare_metric
from scenarios.references import (
    DEFINITIONS_DIR,
    REFERENCES_DIR,
    ReferencesOutOfDateError,
    StaleReferencesError,
    build_all,
    build_references,
    load_scenarios,
    reference_for,
    references_path,
)
from scenarios.tpch.world import TABLES, TpchWorld, duckdb_data_hash, scale_factor
from stores.base import DatasetFiles
from stores.registry import load_store_class

LEVEL7 = [s for s in load_scenarios() if s.level == 7]
SNAP = "sf0.01"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> DatasetFiles:
    return TpchWorld().ensure_built(tmp_path_factory.mktemp("data"), SNAP)


@pytest.mark.parametrize(
    ("snapshot", "sf"), [("sf0.01", "0.01"), ("sf1", "1"), ("sf10", "10"), ("sf0.1", "0.1")]
)
def test_snapshots_are_scale_factors(snapshot: str, sf: str) -> None:
    assert scale_factor(snapshot) == sf


@pytest.mark.parametrize("snapshot", ["1", "sf", "sf-1", "sf0", "sfx", "SF1", "sf1e3"])
def test_other_snapshots_are_refused(snapshot: str) -> None:
    with pytest.raises(ValueError, match="sf<number>"):
        scale_factor(snapshot)


def test_base_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("BACKINTEL_TPCH_SF", raising=False)
    assert scale_factor("base") == "1"
    monkeypatch.setenv("BACKINTEL_TPCH_SF", "0.01")
    assert scale_factor("base") == "0.01"
    assert TpchWorld().build_dir(tmp_path) == tmp_path / "worlds" / "tpch-sf0.01"
    monkeypatch.setenv("BACKINTEL_TPCH_SF", "big")
    with pytest.raises(ValueError, match="BACKINTEL_TPCH_SF"):
        scale_factor("base")


def test_base_resolves_to_the_scale_factor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BACKINTEL_TPCH_SF", raising=False)
    assert TpchWorld().resolve_snapshot("base") == "sf1"
    assert TpchWorld().resolve_snapshot("sf10") == "sf10"
    monkeypatch.setenv("BACKINTEL_TPCH_SF", "0.01")
    assert TpchWorld().resolve_snapshot("base") == "sf0.01"
    monkeypatch.setenv("BACKINTEL_TPCH_SF", "big")
    with pytest.raises(ValueError, match="BACKINTEL_TPCH_SF"):
        TpchWorld().resolve_snapshot("base")


def test_committed_references_are_named_by_scale_factor() -> None:
    seeds = sorted(p.name for p in REFERENCES_DIR.glob("tpch*.moves.json"))
    assert seeds == ["tpch-sf0.01.moves.json", "tpch-sf1.moves.json"]  # `probe_move_cache`
    names = sorted(p.name for p in REFERENCES_DIR.glob("tpch*.json") if p.name not in seeds)
    assert names == ["tpch-sf0.01.json", "tpch-sf1.json"]
    for name in names:
        doc = json.loads((REFERENCES_DIR / name).read_text())
        assert f"tpch-{doc['snapshot']}.json" == name


def test_reference_lookup_follows_the_scale_factor(monkeypatch: pytest.MonkeyPatch) -> None:
    """A level-7 scenario bound to `base` reads `tpch-sf<sf>.json` for the SF in force."""
    q6 = next(s for s in LEVEL7 if s.id == "l7-q6-forecast-revenue-change")
    assert q6.dataset.snapshot == "base"
    small = json.loads(references_path("tpch", SNAP).read_text())
    monkeypatch.setenv("BACKINTEL_TPCH_SF", "0.01")
    expected = small["references"][q6.id]["values"]
    assert reference_for(q6, small["data_hash"]) == expected
    monkeypatch.delenv("BACKINTEL_TPCH_SF")
    with pytest.raises(StaleReferencesError, match=r"tpch-sf1\.json"):
        reference_for(q6, small["data_hash"])  # SF1 references, other data
    monkeypatch.setenv("BACKINTEL_TPCH_SF", "0.5")
    with pytest.raises(StaleReferencesError, match=r"no references file .*tpch-sf0\.5\.json"):
        reference_for(q6, small["data_hash"])


def test_references_check_follows_the_scale_factor(
    tiny: DatasetFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`references build --check` over level 7 passes for an SF whose references are committed
    (reusing the tiny build) and says so, before building anything, for one without."""
    data_root = tiny.parquet_dir.parent.parent.parent
    level7 = DEFINITIONS_DIR / "level7"
    monkeypatch.setenv("BACKINTEL_TPCH_SF", "0.01")
    assert set(build_all(write=False, definitions=level7, data_root=data_root)) == {
        "tpch-sf0.01.json"
    }
    monkeypatch.setenv("BACKINTEL_TPCH_SF", "0.02")
    with pytest.raises(ReferencesOutOfDateError, match=r"no references are committed .*'sf0\.02'"):
        build_all(write=False, definitions=level7, data_root=tmp_path)
    assert not (tmp_path / "worlds").exists()


def _sqlite_rows(path: Path, table: str) -> list[tuple[Any, ...]]:
    """A SQLite table's rows in storage order, each value with its storage class."""
    con = sqlite3.connect(path)
    try:
        names = [c[1] for c in con.execute(f"PRAGMA table_info({table})")]
        typed = ", ".join(f"{n}, typeof({n})" for n in names)
        return con.execute(f"SELECT {typed} FROM {table} ORDER BY rowid").fetchall()
    finally:
        con.close()


def _sqlite_declared(path: Path) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
    finally:
        con.close()


def test_build_has_every_table_in_key_order(tiny: DatasetFiles) -> None:
    """Every table's rows are in primary-key order, in its Parquet file and in SQLite."""
    manifest = json.loads(tiny.extra["manifest"].read_text())
    assert manifest["tables"]["lineitem"] == 60175
    assert manifest["tables"]["region"] == 5
    assert sorted(tiny.tables) == sorted(TABLES)
    sqlite_path = tiny.parquet_dir.parent / "tpch.sqlite"
    for table, key in TABLES.items():
        parquet_keys = pl.read_parquet(tiny.parquet_dir / f"{table}.parquet").select(key).rows()
        assert parquet_keys == sorted(set(parquet_keys)), table
        con = sqlite3.connect(sqlite_path)
        sqlite_keys = con.execute(f"SELECT {', '.join(key)} FROM {table} ORDER BY rowid")
        assert sqlite_keys.fetchall() == parquet_keys, table
        con.close()
        assert manifest["tables"][table] == len(parquet_keys)
    assert manifest["data_hash"] == TpchWorld().data_hash(tiny)


def test_a_build_in_many_parts_is_the_build_in_one(
    tiny: DatasetFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built in eight `dbgen` parts, each sorted and appended, SF0.01 has the rows, order,
    data hash and SQLite file (declared types, indexes, storage classes) of its one-part
    build, and its Parquet row groups are full across parts."""
    from scenarios.tpch import build

    monkeypatch.setattr(build, "BUILD_PARTS", 800)
    monkeypatch.setattr(build, "ROW_GROUP_ROWS", 5000)
    assert build.build_parts("0.01") == 8
    parts = TpchWorld().ensure_built(tmp_path, SNAP)
    assert parts.extra["manifest"].read_text() == tiny.extra["manifest"].read_text()
    one, many = tiny.parquet_dir.parent / "tpch.sqlite", parts.parquet_dir.parent / "tpch.sqlite"
    assert _sqlite_declared(many) == _sqlite_declared(one)
    for table in TABLES:
        file = parts.parquet_dir / f"{table}.parquet"
        assert pl.read_parquet(file).equals(pl.read_parquet(tiny.parquet_dir / f"{table}.parquet"))
        meta = pq.ParquetFile(file).metadata
        groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        assert groups[:-1] == [5000] * (len(groups) - 1), table
        assert 0 < groups[-1] <= 5000, table
        assert _sqlite_rows(many, table) == _sqlite_rows(one, table), table


def test_a_part_whose_keys_are_not_above_the_rows_written_is_refused(tmp_path: Path) -> None:
    """`dbgen`'s parts are appended in key order; a part that would break it is refused."""
    from scenarios.tpch.build import BuiltTables, KeyOrderError, connect, write_part

    out = BuiltTables(tmp_path)
    conn = connect(tmp_path / "spill")
    try:
        conn.execute(f"ATTACH '{tmp_path / 'tpch.sqlite'}' AS lite (TYPE sqlite)")
        conn.execute("CALL dbgen(sf=0.01, children=2, step=1)")
        write_part(conn, out)
        conn.execute("CALL dbgen(sf=0.01, children=2, step=0)")
        with pytest.raises(KeyOrderError, match="not above the last key written"):
            write_part(conn, out)
    finally:
        out.close()
        conn.close()


def test_the_built_data_hash_is_kept_and_read_again_only_after_a_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build keeps the hash its manifest holds (`data_hash.json`): neither the run that
    built the world nor a later one reads the Parquet again until a file changes."""
    built = TpchWorld().ensure_built(tmp_path, SNAP)
    manifest = json.loads(built.extra["manifest"].read_text())
    reads: list[Path] = []

    def counted(parquet_dir: Path) -> str:
        reads.append(parquet_dir)
        return duckdb_data_hash(parquet_dir)

    monkeypatch.setattr("scenarios.tpch.world.duckdb_data_hash", counted)
    assert TpchWorld().data_hash(built) == manifest["data_hash"]
    assert reads == []
    region = built.parquet_dir / "region.parquet"
    pl.read_parquet(region).reverse().write_parquet(region)  # the same rows: the same hash
    assert TpchWorld().data_hash(built) == manifest["data_hash"]
    assert TpchWorld().data_hash(built) == manifest["data_hash"]
    assert reads == [built.parquet_dir]


def test_data_hash_is_deterministic_and_sees_changes(tiny: DatasetFiles, tmp_path: Path) -> None:
    again = TpchWorld().ensure_built(tmp_path, SNAP)
    assert duckdb_data_hash(again.parquet_dir) == duckdb_data_hash(tiny.parquet_dir)
    region = again.parquet_dir / "region.parquet"
    df = pl.read_parquet(region)
    df.with_columns(pl.col("r_name").str.replace("ASIA", "ASIA ")).write_parquet(region)
    assert duckdb_data_hash(again.parquet_dir) != duckdb_data_hash(tiny.parquet_dir)
    df.reverse().write_parquet(region)  # same rows, other order and bytes: same hash
    assert duckdb_data_hash(again.parquet_dir) == duckdb_data_hash(tiny.parquet_dir)


def _at(snapshot: str) -> list[Any]:
    return [
        s.model_copy(update={"dataset": s.dataset.model_copy(update={"snapshot": snapshot})})
        for s in LEVEL7
    ]


def test_level7_scenarios() -> None:
    assert len(LEVEL7) >= 8
    assert sum(not s.answerable for s in LEVEL7) >= 2
    assert {(s.dataset.world, s.dataset.store) for s in LEVEL7} == {("tpch", "lake-parquet")}


def test_references_cross_check_and_match_the_committed_file(tiny: DatasetFiles) -> None:
    """`build_references` runs every oracle and its SQLite check_sql and aborts on a mismatch;
    its result equals the committed sf0.01 references."""
    doc = build_references(_at(SNAP), TpchWorld(), tiny, SNAP)
    committed = json.loads(references_path("tpch", SNAP).read_text())
    assert committed["data_hash"] == doc["data_hash"]
    assert json.loads(json.dumps(doc["references"])) == committed["references"]


@pytest.mark.parametrize("scenario", [s for s in LEVEL7 if s.answerable], ids=lambda s: s.id)
def test_check_sql_on_a_lake_store_agrees(
    scenario: Any, tiny: DatasetFiles, tmp_path: Path
) -> None:
    """The reference analyst's path: check_sql translated to DuckDB on `lake-parquet`."""
    from scenarios.tpch.oracles import ORACLES

    expected = ORACLES[scenario.oracle_name](tiny.parquet_dir)
    store = load_store_class("lake-parquet")(tmp_path)
    store.setup_session()
    item = store.provision(tiny)
    try:
        with item.connect() as session:
            rows = session.run_sql(translate(scenario.check_sql, "duckdb")).records()
    finally:
        item.teardown()
    (spec,) = scenario.metrics if len(scenario.metrics) == 1 else (None,)
    got = {spec.name: rows} if spec is not None and spec.kind == "table" else rows[0]
    for metric in scenario.metrics:
        cmp = compare_metric(metric, expected[metric.name], got[metric.name])
        assert cmp.ok, (metric.name, cmp.detail)


def test_a_wrong_oracle_is_caught(tiny: DatasetFiles) -> None:
    """The cross-check rejects an oracle that forgets Q6's quantity filter."""
    from scenarios.references import ReferenceMismatchError
    from scenarios.tpch.oracles import ORACLES

    class Wrong(TpchWorld):
        @property
        def oracles(self) -> dict[str, Any]:
            def q6(pq: Path) -> dict[str, Any]:
                li = pl.read_parquet(pq / "lineitem.parquet")
                return {"forecast_revenue_change": float((li["l_extendedprice"].cast(
                    pl.Float64) * li["l_discount"].cast(pl.Float64)).sum())}  # fmt: skip

            return dict(ORACLES) | {"l7_q6_forecast_revenue_change": q6}

    q6 = [s for s in _at(SNAP) if s.id == "l7-q6-forecast-revenue-change"]
    with pytest.raises(ReferenceMismatchError, match="disagree"):
        build_references(q6, Wrong(), tiny, SNAP)


def test_docs_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = (Path(__file__).parent.parent / "docs" / "tpch.md").read_text(encoding="utf-8")
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(block, "docs/tpch.md", "exec"), {})
    expected = text.split("prints\n\n", 1)[1].split("\n\n", 1)[0]
    assert capsys.readouterr().out.splitlines() == [line.strip() for line in expected.splitlines()]


def test_a_kept_hash_written_by_the_last_release_is_read_by_its_method(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last release kept `data_hash.json` without a `method` (only Olist-style worlds, by
    `content_hash`): such a file is still read for them, and never taken as TPC-H's hash (its
    hash is read again and kept with its method)."""
    from scenarios.world_base import DATA_HASH_FILE, _files_state, built_content_hash

    built = TpchWorld().ensure_built(tmp_path, SNAP)
    kept = built.parquet_dir.parent / DATA_HASH_FILE
    old = {"data_hash": "0" * 64, "files": _files_state(built.parquet_dir)}  # no `method`
    kept.write_text(json.dumps(old))
    assert built_content_hash(built.parquet_dir) == "0" * 64  # content_hash's file: read
    manifest = json.loads(built.extra["manifest"].read_text())
    assert TpchWorld().data_hash(built) == manifest["data_hash"]  # not the method's: hashed
    assert json.loads(kept.read_text())["method"] == TpchWorld.fingerprint_method
