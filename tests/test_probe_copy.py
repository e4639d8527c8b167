"""A probe's copy, written once in the background (SQLite; a DuckDB file, Parquet or CSV
folder): its sessions give what the views give (the same rows dropped, the same numbers
moved), the source's own views come along, and a builder killed mid-copy leaves nothing the
next build keeps."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock
from test_probe_keys import write_parquet, write_sqlite

from stores.common.probe_copies import keep_current
from stores.common.view_plan import DONE_FILE, build_once
from stores.duckdb.perturb_views import _types, duckdb_plan
from stores.duckdb.probe import DuckDBProbeStore
from stores.duckdb.probe import materialise as duckdb_materialise
from stores.duckdb.reading import DuckDBSource, open_source
from stores.engine.common import DuckDBSession
from stores.probe import ViewProbeStore
from stores.sqlite.perturb_views import sqlite_plan
from stores.sqlite.probe import SQLiteProbeStore, materialise

QUERIES = (
    "SELECT COUNT(*) FROM Invoice",
    "SELECT COUNT(*) FROM Customer",
    "SELECT COUNT(*) FROM InvoiceLine",
    "SELECT ROUND(SUM(Total), 6) FROM Invoice",
    "SELECT BillingCountry, COUNT(*), ROUND(SUM(Total), 6) FROM Invoice GROUP BY 1 ORDER BY 1",
)


def _probe(db: Path, dest: Path, salt: int, copy: bool) -> SQLiteProbeStore:
    plans, _ = sqlite_plan(db)
    out = dest / f"copy-{salt}.sqlite"

    def materialised() -> Path:
        if not out.exists():
            materialise(db, plans, salt, out)
        return out

    return SQLiteProbeStore(db, f"p{salt}", 10.0, plans, salt, materialised, copy)


def test_the_copy_reads_as_the_views_and_moves_the_data(tmp_path: Path) -> None:
    db = tmp_path / "chinook.sqlite"
    write_sqlite(db)
    import sqlite3

    con = sqlite3.connect(db)
    con.execute("CREATE VIEW usa AS SELECT * FROM Invoice WHERE BillingCountry = 'USA'")
    con.commit()
    source = {q: con.execute(q).fetchall() for q in QUERIES}
    con.close()
    for salt in (1, 2):
        copied = _probe(db, tmp_path, salt, True)
        same_as_views(_probe(db, tmp_path, salt, False), copied, source)
        with copied.connect() as b:
            assert b.run_sql("SELECT COUNT(*) FROM usa").rows[0][0] > 0
        copied.teardown()


def same_as_views(views: ViewProbeStore, copied: ViewProbeStore, source: dict[str, Any]) -> None:
    """The copy's sessions give what the views' give, and not what the source gives."""
    try:
        with views.connect() as a, copied.connect() as b:
            assert copied.copied
            assert not views.copied
            for q in QUERIES:
                assert a.run_sql(q).rows == b.run_sql(q).rows, q
                assert b.run_sql(q).rows != source[q], q
    finally:
        views.teardown()
        copied.teardown()


def _duckdb_probe(source: DuckDBSource, dest: Path, salt: int, copy: bool) -> DuckDBProbeStore:
    plans, _ = duckdb_plan(source)
    out = dest / f"copy-{source.kind}-{salt}"

    def materialised() -> Path:
        if not out.exists():
            return duckdb_materialise(source, plans, _types(plans), salt, out)
        return out / ("data.duckdb" if source.kind == "duckdb" else "data")

    return DuckDBProbeStore(
        source.kind, f"p{salt}", 10.0, source, plans, _types(plans), salt, materialised, copy
    )


@pytest.mark.parametrize("kind", ["parquet", "duckdb"])
def test_a_duckdb_served_copy_reads_as_the_views(tmp_path: Path, kind: str) -> None:
    import duckdb

    folder = tmp_path / "lake"
    write_parquet(folder)
    if kind == "duckdb":
        con = duckdb.connect(str(tmp_path / "src.duckdb"))
        for path in sorted(folder.glob("*.parquet")):
            con.execute(f"CREATE TABLE {path.stem} AS SELECT * FROM read_parquet('{path}')")
        con.close()
    source = DuckDBSource(kind, folder if kind == "parquet" else tmp_path / "src.duckdb")
    with DuckDBSession(open_source(source, "256MB"), timeout_s=10, where="src") as truth:
        before = {q: truth.run_sql(q).rows for q in QUERIES}
    for salt in (1, 2):
        views, copied = (_duckdb_probe(source, tmp_path, salt, c) for c in (False, True))
        same_as_views(views, copied, before)


def test_a_builder_killed_mid_build_leaves_nothing_behind(tmp_path: Path) -> None:
    final = tmp_path / "probe-v1"
    dead = tmp_path / ".probe-v1.tmp-abc123"
    dead.mkdir()
    (dead / "data.sqlite").write_bytes(b"half a file")
    other = tmp_path / ".another-v1.tmp-abc123"
    other.mkdir()

    def build(tmp: Path) -> None:
        (tmp / DONE_FILE).write_text("{}")

    build_once(tmp_path, final, build)
    assert (final / DONE_FILE).is_file()
    assert not dead.exists()
    assert other.exists(), "another probe's build is not this one's to remove"


def test_copies_of_earlier_states_are_evicted_but_the_last_used_one(tmp_path: Path) -> None:
    family = "chinook-sqlite-views-"

    def copy(rest: str, used: float) -> Path:
        folder = tmp_path / f"{family}{rest}"
        folder.mkdir()
        (folder / DONE_FILE).write_text("{}")
        os.utime(folder / DONE_FILE, (used, used))
        return folder

    current = [copy("v6-s1-aaaa", 100), copy("v6-s2-aaaa", 100)]
    previous = [copy("v6-s1-bbbb", 300), copy("v6-s2-bbbb", 300)]
    oldest = [copy("v6-s1-cccc", 200), copy("v5-s1-aaaa", 50)]
    other = tmp_path / "orders-sqlite-views-v6-s1-cccc"
    other.mkdir()
    busy = copy("v6-s1-dddd", 10)
    with FileLock(str(busy) + ".lock"):  # a builder holds it: it stays
        removed = keep_current(tmp_path, current[0], family)
    assert sorted(removed) == sorted(oldest)
    assert all(p.is_dir() for p in [*current, *previous, other, busy])
    assert not any(p.exists() for p in oldest)
    assert (current[0] / DONE_FILE).stat().st_mtime > 300, "marked used now"
    assert keep_current(tmp_path, current[0], family) == [busy]
