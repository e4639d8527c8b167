"""The split Olist world (`olist_orders` + `olist_catalog`) and the level-4 scenarios over it."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from pytest_backintel.evidence.dialects import translate
from pytest_backintel.tolerance import compare_metric
from scenarios.references import attach_parts, load_scenarios, references_path
from scenarios.split.oracles import ORACLES
from scenarios.split.world import PARTS, SPLIT_STORE, build_split
from scenarios.worlds import content_hash, get_world
from stores.base import DatasetFiles
from stores.registry import load_store_class

LEVEL4 = [s for s in load_scenarios() if s.level == 4]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> DatasetFiles:
    """A small split build (300 orders) in its own data folder."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BACKINTEL_OLIST_ORDERS", "300")
        return build_split(tmp_path_factory.mktemp("data"))


def test_parts_hold_their_tables_and_together_the_whole(small: DatasetFiles) -> None:
    assert set(small.tables) == {t for tables in PARTS.values() for t in tables}
    for part, tables in PARTS.items():
        parquet = small.extra[f"parquet:{part}"]
        assert sorted(p.stem for p in parquet.glob("*.parquet")) == sorted(tables)
        with sqlite3.connect(small.extra[f"sqlite:{part}"]) as con:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
        assert names >= set(tables)
        assert not names & ({t for ts in PARTS.values() for t in ts} - set(tables))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BACKINTEL_OLIST_ORDERS", "300")
        olist = get_world("olist").ensure_built(small.parquet_dir.parent.parent.parent)
    assert content_hash(olist.parquet_dir) == content_hash(small.parquet_dir)


def test_level4_scenarios_need_both_stores() -> None:
    assert len(LEVEL4) >= 8
    assert sum(not s.answerable for s in LEVEL4) >= 2
    for s in LEVEL4:
        assert s.dataset.world == "olist-split"
        assert s.dataset.store == SPLIT_STORE
        if s.check_sql:
            assert "olist_orders." in s.check_sql
            assert "olist_catalog." in s.check_sql


def _sqlite_rows(files: DatasetFiles, sql: str) -> list[dict[str, Any]]:
    assert files.sqlite_path is not None
    con = sqlite3.connect(f"{files.sqlite_path.as_uri()}?mode=ro", uri=True)
    try:
        attach_parts(con, files)
        cur = con.execute(sql)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()


def _as_values(scenario: Any, rows: list[dict[str, Any]]) -> dict[str, Any]:
    if len(scenario.metrics) == 1 and scenario.metrics[0].kind == "table":
        return {scenario.metrics[0].name: rows}
    assert len(rows) == 1
    return rows[0]


@pytest.mark.parametrize("scenario", [s for s in LEVEL4 if s.answerable], ids=lambda s: s.id)
def test_oracle_agrees_with_check_sql_on_sqlite_and_on_a_multi_store(
    scenario: Any, small: DatasetFiles, tmp_path: Path
) -> None:
    """At another config than the committed references, so the agreement is not a fixed
    point of one data set; the multi store runs the check translated to DuckDB."""
    expected = ORACLES[scenario.oracle_name](small.parquet_dir)
    on_sqlite = _as_values(scenario, _sqlite_rows(small, scenario.check_sql))
    store = load_store_class("multi:lake-parquet:olist_orders+sqlite:olist_catalog")(tmp_path)
    store.setup_session()
    item = store.provision(small)
    try:
        with item.connect() as session:
            result = session.run_sql(translate(scenario.check_sql, "duckdb"), max_rows=1000)
        on_multi = _as_values(scenario, result.records())
    finally:
        item.teardown()
        store.teardown_session()
    for spec in scenario.metrics:
        for got in (on_sqlite[spec.name], on_multi[spec.name]):
            cmp = compare_metric(spec, expected[spec.name], got)
            assert cmp.ok, (spec.name, cmp.detail)


def test_a_wrong_check_is_caught(small: DatasetFiles) -> None:
    """The same comparison rejects a check that counts every item instead of delivered ones."""
    scenario = next(s for s in LEVEL4 if s.id == "l4-untranslated-share-delivered")
    assert scenario.check_sql is not None
    wrong = scenario.check_sql.replace("WHERE o.order_status = 'delivered'", "")
    got = _as_values(scenario, _sqlite_rows(small, wrong))
    expected = ORACLES[scenario.oracle_name](small.parquet_dir)
    spec = scenario.metric("untranslated_item_share")
    assert spec is not None
    assert not compare_metric(spec, expected[spec.name], got[spec.name]).ok


def test_committed_references_cover_every_level4_scenario() -> None:
    import json

    doc = json.loads(references_path("olist-split").read_text())
    assert set(doc["references"]) == {s.id for s in LEVEL4}
    for s in LEVEL4:
        assert (doc["references"][s.id]["values"] is None) == (not s.answerable)


def test_docs_example_runs(
    small: DatasetFiles, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/stores.md's multi example, over the small build's data folder."""
    from scenarios.worlds import DATA_DIR_ENV

    monkeypatch.setenv(DATA_DIR_ENV, str(small.parquet_dir.parent.parent.parent))
    monkeypatch.setenv("BACKINTEL_OLIST_ORDERS", "300")
    text = (Path(__file__).parent.parent / "docs" / "stores.md").read_text(encoding="utf-8")
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(block, "docs/stores.md", "exec"), {})
    expected = text.split("prints\n\n", 1)[1].split("\n\n", 1)[0]
    assert capsys.readouterr().out.splitlines() == [line.strip() for line in expected.splitlines()]
