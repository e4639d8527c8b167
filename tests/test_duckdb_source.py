"""A DuckDB file, Parquet folder or CSV folder of your own is used in place: each item reaches
it under an opaque name of its own through links, read-only, with no byte copy; a write to the
source is seen by the signature check (and is an `infra_error` when it happens during a
trial); the content hash is streamed once per state of each file; the data probe is views over
the source, planned from the catalog, which a schema-qualified name cannot bypass; and a
literal hidden in evidence is `unsupported_evidence` on a schema with CamelCase declared keys
and DECIMAL money, on the duckdb, lake-parquet and csv bindings."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from test_own_data import backintel, pytest_run
from test_probe_keys import (
    COUNTRIES,
    SCENARIOS,
    literals,
    project,
    rows,
    score,
    truth,
    write_parquet,
)

from stores.base import DatasetFiles, QueryRefused
from stores.common.signed_hashes import SignedHashes
from stores.duckdb.source import SOURCE_STORES, DuckDBSource, DuckDBSourceStore
from stores.engine.common import logical_fingerprint

KINDS = ("duckdb", "parquet", "csv")

DUCKDB_DDL = [
    "CREATE TABLE Customer (CustomerId BIGINT PRIMARY KEY, FullName VARCHAR NOT NULL, "
    "Country VARCHAR NOT NULL)",
    "CREATE TABLE Invoice (InvoiceId BIGINT PRIMARY KEY, CustomerId BIGINT NOT NULL "
    "REFERENCES Customer (CustomerId), BillingCountry VARCHAR NOT NULL, "
    "Total DECIMAL(10,2) NOT NULL)",
    "CREATE TABLE InvoiceLine (InvoiceLineId BIGINT PRIMARY KEY, InvoiceId BIGINT NOT NULL "
    "REFERENCES Invoice (InvoiceId), UnitPrice DECIMAL(10,2) NOT NULL, Quantity BIGINT NOT NULL)",
]


def write_duckdb(path: Path) -> None:
    """The Chinook-like schema with declared CamelCase keys and DECIMAL(10,2) money."""
    con = duckdb.connect(str(path))
    for ddl in DUCKDB_DDL:
        con.execute(ddl)
    for table, data in rows().items():
        marks = ", ".join("?" * len(data[0]))
        con.executemany(f"INSERT INTO {table} VALUES ({marks})", data)
    con.close()


def write_csv(folder: Path) -> None:
    """The same tables as CSV files, their types (DECIMAL money) pinned by `_schema.json`."""
    parquet = folder.parent / f"{folder.name}-parquet"
    write_parquet(parquet)
    folder.mkdir()
    schema = {}
    for path in sorted(parquet.glob("*.parquet")):
        rel = duckdb.sql(f"SELECT * FROM read_parquet('{path}')")
        schema[path.stem] = dict(zip(rel.columns, (str(t) for t in rel.types), strict=True))
        duckdb.sql(f"COPY (SELECT * FROM read_parquet('{path}')) TO '{folder}/{path.stem}.csv'")
    (folder / "_schema.json").write_text(json.dumps(schema))


def make(kind: str, tmp_path: Path) -> tuple[Path, str]:
    """The source in `kind` form under `tmp_path`, and its scenario binding."""
    if kind == "duckdb":
        write_duckdb(tmp_path / "chinook.duckdb")
        return tmp_path / "chinook.duckdb", "{duckdb: ../chinook.duckdb}"
    if kind == "parquet":
        write_parquet(tmp_path / "exports")
        return tmp_path / "exports", "{parquet: ../exports}"
    write_csv(tmp_path / "csv")
    return tmp_path / "csv", "{csv: ../csv}"


def dataset(kind: str, where: Path) -> DatasetFiles:
    if kind == "parquet":
        return DatasetFiles("chinook", parquet_dir=where)
    return DatasetFiles("chinook", parquet_dir=where, extra={kind: where})


def snapshot(where: Path) -> dict[str, tuple[bytes, int, int]]:
    files = [where] if where.is_file() else sorted(where.iterdir())
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_mode) for p in files}


def test_bytes_changed_behind_a_cached_hash_are_a_change_of_the_run(tmp_path: Path) -> None:
    """A later process reads each file's hash from the cache; when the bytes behind an
    unchanged signature differ, the end-of-run re-read puts it in the store's `changes`
    (the session's `run.json` `source_changes`), where a clean run has none."""
    where, _ = make("parquet", tmp_path)
    workdir = tmp_path / "stores" / "lake-parquet"
    first = SOURCE_STORES["parquet"](workdir / "1")
    first.setup_session()
    first.provision(dataset("parquet", where)).teardown()
    first.teardown_session()
    assert first.changes == []
    cache = workdir / "hashes"
    entry = max(cache.iterdir(), key=lambda p: p.stat().st_mtime_ns)
    entry.write_text("f" * 64)  # as if the bytes had moved behind the signature
    later = SOURCE_STORES["parquet"](workdir / "2")
    later.setup_session()
    later.provision(dataset("parquet", where)).teardown()
    later.teardown_session()
    (change,) = later.changes
    assert change.startswith("the source changed during the run: "), change
    assert "holds other bytes" in change, change


@pytest.mark.parametrize("kind", KINDS)
def test_items_share_the_source_under_opaque_names_without_a_copy(
    tmp_path: Path, kind: str
) -> None:
    where, _ = make(kind, tmp_path)
    before = snapshot(where)
    store = SOURCE_STORES[kind](tmp_path / "stores" / kind / "1")
    store.setup_session()
    one, two = store.provision(dataset(kind, where)), store.provision(dataset(kind, where))
    try:
        assert one.mount_path is not None
        assert two.mount_path is not None
        assert one.mount_path != two.mount_path
        assert one.mount_path.is_symlink()
        assert one.mount_path.resolve() == where.resolve()  # the source itself, not a copy
        copies = [p for p in store.workdir.rglob("*") if p.is_file() and not p.is_symlink()]
        assert {p.name for p in copies} <= {"catalog.duckdb", ".backintel-owner.json"}, copies
        with one.connect() as session:
            assert session.run_sql("SELECT COUNT(*) AS n FROM Invoice").rows == [(412,)]
            with pytest.raises(QueryRefused):
                session.run_sql("DELETE FROM Invoice")
            name = session.run_sql("SELECT current_database() AS d").rows[0][0]
            assert "chinook" not in str(name)
        conn = one.engine_connection()  # the engine alone refuses writes and file access
        try:
            with pytest.raises(duckdb.Error):
                conn.execute("CREATE TABLE store.main.x AS SELECT 1")
            with pytest.raises(duckdb.Error):
                conn.execute(f"SELECT * FROM read_csv('{tmp_path}/elsewhere.csv')")
        finally:
            conn.close()
        assert one.fingerprint() == two.fingerprint()
        conn = one.engine_connection()  # the fingerprint names what the analyst sees
        try:
            assert one.fingerprint().logical == logical_fingerprint(conn)
        finally:
            conn.close()
    finally:
        one.teardown()
        two.teardown()
        store.teardown_session()
    assert not one.root.exists()
    assert snapshot(where) == before


@pytest.mark.parametrize("kind", KINDS)
def test_a_write_to_the_source_moves_the_fingerprint(tmp_path: Path, kind: str) -> None:
    where, _ = make(kind, tmp_path)
    store = SOURCE_STORES[kind](tmp_path / "stores" / kind / "1")
    store.setup_session()
    item = store.provision(dataset(kind, where))
    try:
        first = item.fingerprint()
        assert item.fingerprint() == first
        write_behind(kind, where)
        after = item.fingerprint()
        assert after.physical != first.physical
        assert after.logical != first.logical
    finally:
        item.teardown()
        store.teardown_session()


def write_behind(kind: str, where: Path) -> None:
    """Someone else changes one invoice in the source."""
    if kind == "duckdb":
        con = duckdb.connect(str(where))
        con.execute("UPDATE Invoice SET Total = Total + 1 WHERE InvoiceId = 7")
        con.close()
        return
    path = where / f"Invoice.{'parquet' if kind == 'parquet' else 'csv'}"
    reader = "read_parquet" if kind == "parquet" else "read_csv"
    changed = duckdb.sql(
        f"SELECT * REPLACE (CASE WHEN InvoiceId = 7 THEN Total + 1 ELSE Total END AS Total) "
        f"FROM {reader}('{path}')"
    ).fetchall()
    cols = duckdb.sql(f"SELECT * FROM {reader}('{path}') LIMIT 0").columns
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t ({', '.join(f'{c} VARCHAR' for c in cols)})")
    con.executemany(f"INSERT INTO t VALUES ({', '.join('?' * len(cols))})", changed)
    fmt = "FORMAT parquet" if kind == "parquet" else "HEADER"
    con.execute(f"COPY t TO '{path}' ({fmt})")
    con.close()


def test_each_files_hash_is_streamed_once_per_state(tmp_path: Path) -> None:
    """A folder's digest covers every file; a write to one file hashes that file again (its
    cache gains one entry), not the others; a later process reads the cache."""
    write_parquet(tmp_path / "exports")
    files = sorted((tmp_path / "exports").iterdir())
    cache = tmp_path / "hashes"
    states, digest = SignedHashes(cache).many(files)
    assert len(list(cache.iterdir())) == len(files) == len(states)
    assert SignedHashes(cache).many(files) == (states, digest)
    write_behind("parquet", tmp_path / "exports")
    moved_states, moved = SignedHashes(cache).many(files)
    assert moved != digest
    assert sum(a != b for a, b in zip(states, moved_states, strict=True)) == 1
    assert len(list(cache.iterdir())) == len(files) + 1
    stale = SignedHashes(cache)  # a cache entry that lies is found by the end-of-run check
    entry = max(cache.iterdir(), key=lambda p: p.stat().st_mtime_ns)
    entry.write_text("f" * 64)
    stale.many(files)
    (problem,) = stale.recheck()
    assert "Invoice.parquet holds other bytes" in problem


@pytest.mark.parametrize("kind", KINDS)
def test_the_probe_is_views_planned_from_the_catalog_that_a_schema_name_cannot_bypass(
    tmp_path: Path, kind: str
) -> None:
    """Keys come from declared constraints (DuckDB) or CamelCase names (Parquet, CSV); rows
    drop by key and follow the foreign key; DECIMAL money moves and keeps its type;
    `main.Invoice` and `memory.main.Invoice` are the probe's views; the analyst's alias
    `store` does not exist there; the Python copy holds what the views show."""
    from stores.duckdb.perturb_views import duckdb_plan
    from stores.duckdb.probe import DuckDBProbeStore, materialise

    where, _ = make(kind, tmp_path)
    source = DuckDBSource(kind, where)
    plans, notes = duckdb_plan(source)
    assert notes == []
    assert plans["Invoice"].key == ["InvoiceId"]
    assert plans["Invoice"].parents == [(["CustomerId"], "Customer", ["CustomerId"])]
    assert plans["Invoice"].scale == ["Total"]
    assert plans["InvoiceLine"].scale == ["UnitPrice"]
    types = {t: p.types for t, p in plans.items()}  # type: ignore[attr-defined]
    probe = DuckDBProbeStore("duckdb", "bi_probe", 10.0, source, plans, types, salt=1)
    query = (
        "SELECT COUNT(*) AS n, SUM(Total) AS s, typeof(ANY_VALUE(Total)) AS t, "
        "COUNT(*) FILTER (WHERE CustomerId NOT IN (SELECT CustomerId FROM Customer)) AS o "
        "FROM Invoice"
    )
    with probe.local_session() as session:
        ((count, total, typ, orphans),) = session.run_sql(query).rows
        assert 150 < count < 412
        assert orphans == 0
        assert typ == "DECIMAL(10,2)"
        for qualified in ("main.Invoice", "memory.main.Invoice", '"main"."Invoice"'):
            got = session.run_sql(f"SELECT COUNT(*) FROM {qualified}").rows
            assert got == [(count,)], qualified
        with pytest.raises(Exception, match="store"):
            session.run_sql("SELECT COUNT(*) FROM store.main.Invoice")
        with pytest.raises(QueryRefused):
            session.run_sql("SELECT COUNT(*) FROM query_table('Invoice')")
    whole = truth()
    assert count != 412
    assert float(total) != pytest.approx(whole["largest-invoice"])
    out = materialise(source, plans, types, 1, tmp_path / "probe")
    con = duckdb.connect(str(out)) if kind == "duckdb" else duckdb.connect()
    table = "Invoice" if kind == "duckdb" else f"read_{kind}('{out}/Invoice.{kind}')"
    assert con.execute(f"SELECT COUNT(*) FROM {table}").fetchone() == (count,)
    con.close()


@pytest.mark.parametrize("kind", KINDS)
def test_hidden_literals_are_unsupported_on_camelcase_keys_and_decimal_money(
    tmp_path: Path, kind: str
) -> None:
    _, binding = make(kind, tmp_path)
    folder = project(tmp_path, binding)
    build = backintel(folder, "references", "build")
    assert build.returncode == 0, build.stdout + build.stderr
    expected = truth()
    seen: dict[str, object] = {}
    for sid, (_, metric, _, _, sql) in SCENARIOS.items():
        value = float(expected[sid]) if SCENARIOS[sid][2] == "currency" else expected[sid]
        honest = score(folder, sid, value, "sql", sql)
        assert honest["outcome"] == "pass", honest
        assert honest["probe_gaps"] == [], honest["probe_gaps"]
        for what, (evidence_kind, code) in literals(value, metric).items():
            got = score(folder, sid, value, evidence_kind, code)
            seen[f"{sid}: {what}"] = got["outcome"]
            assert got["outcome"] == "unsupported_evidence", (what, got)
    print(kind, seen)


@pytest.mark.parametrize("kind", ["duckdb", "parquet"])
def test_a_table_with_no_usable_key_is_named(tmp_path: Path, kind: str) -> None:
    """`Rate` has no declared key, no id-like column and no foreign key: the probe drops its
    rows by a hash of the whole row, so a count over it moves and no probe gap is named."""
    where, binding = make(kind, tmp_path)
    rates = "SELECT * FROM (VALUES " + ", ".join(f"('{c}', 0.2)" for c in COUNTRIES) + ")"
    if kind == "duckdb":
        con = duckdb.connect(str(where))
        con.execute(
            f"CREATE TABLE Rate AS SELECT col0 AS Country, col1::DOUBLE AS Vat FROM ({rates})"
        )
        con.close()
    else:
        duckdb.sql(
            f"COPY (SELECT col0 AS Country, col1::DOUBLE AS Vat FROM ({rates})) "
            f"TO '{where}/Rate.parquet'"
        )
    folder = project(tmp_path, binding)
    assert backintel(folder, "references", "build").returncode == 0
    got = score(folder, "usa-invoices", 5, "sql", "SELECT 5 AS usa_invoices FROM Rate LIMIT 1")
    assert got["probe_gaps"] == [], got["probe_gaps"]


WRITER = """
import duckdb
from pathlib import Path

from pytest_backintel.analyst_api import AnalystRun
from pytest_backintel.contract import AnalystAnswer

SOURCE = {source!r}
KIND = {kind!r}


class Writer:
    name, kind = "writer", "custom"

    def answer(self, task):
        with task.connect() as store:
            n = store.run_sql("SELECT COUNT(*) AS n FROM Invoice WHERE BillingCountry = 'USA'")
        value = n.rows[0][0]
        if KIND == "duckdb":
            con = duckdb.connect(SOURCE)
            con.execute("UPDATE Invoice SET Total = Total + 1 WHERE InvoiceId = 7")
            con.close()
        else:
            Path(SOURCE, "Extra.parquet").write_bytes(Path(SOURCE, "Customer.parquet").read_bytes())
        return AnalystRun(AnalystAnswer.model_validate({{
            "status": "answered",
            "metrics": [{{"name": "usa_invoices", "value": value, "unit": "invoices"}}],
            "evidence": [],
        }}))


def build(config):
    return Writer()
"""


@pytest.mark.parametrize("kind", ["duckdb", "parquet"])
def test_a_write_to_the_source_during_a_trial_is_an_infra_error(tmp_path: Path, kind: str) -> None:
    where, binding = make(kind, tmp_path)
    folder = project(tmp_path, binding)
    assert backintel(folder, "references", "build").returncode == 0
    (folder / "writer.py").write_text(WRITER.format(source=str(where), kind=kind))
    run = pytest_run(folder, "-k", "usa", "--analyst", "writer:build", "--run-id", "w")
    (record,) = [json.loads(line) for line in (folder / "results/w/records.jsonl").open()]
    assert record["outcome"] == "infra_error", run.stdout[-3000:]
    assert "the store changed during the trial" in json.dumps(record["reasons"]), record


def test_the_in_place_stores_are_the_native_backends_of_their_sources(tmp_path: Path) -> None:
    from pytest_backintel.collect.user_data import NATIVE

    assert {SOURCE_STORES[k](tmp_path).name for k in KINDS} == {NATIVE[k] for k in KINDS}
    assert all(issubclass(type(SOURCE_STORES[k](tmp_path)), DuckDBSourceStore) for k in KINDS)


def test_the_plan_is_read_once_per_state_of_the_source(tmp_path: Path) -> None:
    """Planning reads every row (a candidate key's uniqueness), so its result is kept by the
    source's content digest: the next process reads it back equal; a changed source is
    planned again."""
    from stores.duckdb.perturb_views import DUCKDB_VIEWS

    where, _ = make("parquet", tmp_path)
    store = SOURCE_STORES["parquet"](tmp_path / "stores" / "p" / "1")
    files = dataset("parquet", where)
    first = DUCKDB_VIEWS.plan(store, files)
    (saved,) = (tmp_path / "stores" / "p" / "plans").iterdir()
    again = SOURCE_STORES["parquet"](tmp_path / "stores" / "p" / "2")
    assert DUCKDB_VIEWS.plan(again, files) == first
    write_behind("parquet", where)
    moved, _ = DUCKDB_VIEWS.plan(again, files)  # planned again (the rewrite typed it as text)
    assert moved["Invoice"].key == first[0]["Invoice"].key
    assert len(list(saved.parent.iterdir())) == 2


def test_a_view_of_the_source_is_named_in_the_notes(tmp_path: Path) -> None:
    """A DuckDB file's own view reads the source's tables, not the probe's: the notes say so
    (and the view still works on the probe)."""
    from stores.duckdb.perturb_views import duckdb_plan
    from stores.duckdb.probe import DuckDBProbeStore

    where, _ = make("duckdb", tmp_path)
    con = duckdb.connect(str(where))
    con.execute("CREATE VIEW UsaInvoice AS SELECT * FROM Invoice WHERE BillingCountry = 'USA'")
    con.close()
    source = DuckDBSource("duckdb", where)
    plans, notes = duckdb_plan(source)
    assert [n.split(":")[0] for n in notes] == [
        "view 'UsaInvoice' reads the source's own tables, not the probe's"
    ]
    types = {t: p.types for t, p in plans.items()}  # type: ignore[attr-defined]
    probe = DuckDBProbeStore("duckdb", "bi_probe", 10.0, source, plans, types, salt=1)
    with probe.local_session() as session:
        assert session.run_sql("SELECT COUNT(*) FROM UsaInvoice").rows[0][0] > 0
