"""A ClickHouse source used in place (`stores.clickhouse.source`), on a real server (the
`clickhouse_server` fixture: Debian's 18.16 started in a temp folder): the reference analyst
passes with nothing named `bi_` left on the server; each item reads only its own database of
views, with `readonly=1` enforced by the server and everything else (system tables, the source
database by name, table functions, settings) refused and recorded; hidden literals are
`unsupported_evidence` through the probes' views, also from Python evidence through the query
channel; a write during a trial is `infra_error`, named; `backintel clean` drops the databases of
a killed run; the password is `***` in every error, record, run.json and lock file.

The source is a database of its own per test with CamelCase keys (`Customer`, `Invoice` with
`CustomerId` and a `Decimal(10, 2)` `Total`), dropped after the test.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from test_own_data import backintel, pytest_run
from test_probe_keys import rows

from stores.base import DatasetFiles, QueryRefused, StoreError
from stores.clickhouse.http import ClickHouseHTTPError, HttpClient

REQUIRED = "clickhouse-server" in os.environ.get("BACKINTEL_REQUIRE", "")

DDL = [
    "CREATE TABLE {db}.Customer (CustomerId Int32, FullName String, Country String) "
    "ENGINE = MergeTree ORDER BY CustomerId",
    "CREATE TABLE {db}.Invoice (InvoiceId Int32, CustomerId Int32, BillingCountry String, "
    "Total Decimal(10, 2)) ENGINE = MergeTree ORDER BY InvoiceId",
    "CREATE TABLE {db}.InvoiceLine (InvoiceLineId Int32, InvoiceId Int32, "
    "UnitPrice Decimal(10, 2), Quantity Int32) ENGINE = MergeTree ORDER BY InvoiceLineId",
    "CREATE TABLE {db}.Note (Body String) ENGINE = MergeTree ORDER BY tuple()",  # no key
]
SCENARIOS = {
    "usa-invoices": (
        "How many invoices were billed to the USA?",
        "count",
        "invoices",
        "SELECT count() AS m FROM Invoice WHERE BillingCountry = 'USA'",
    ),
    "largest-invoice": (
        "What is the largest invoice total?",
        "currency",
        "USD",
        "SELECT max(Total) AS m FROM Invoice",
    ),
}


def _tsv(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


@pytest.fixture
def server(clickhouse_server: dict[str, str]) -> HttpClient:
    """The admin account of the test server."""
    dsn = clickhouse_server.get("BACKINTEL_CLICKHOUSE_DSN") or ""
    if not dsn:
        why = "no clickhouse-server to start here (or BACKINTEL_CLICKHOUSE_DSN names the user's)"
        if REQUIRED:
            pytest.fail(f"{why} (required by BACKINTEL_REQUIRE)")
        pytest.skip(why)
    return HttpClient(dsn)


@pytest.fixture
def source(
    server: HttpClient, clickhouse_server: dict[str, str]
) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(DSN, database, true values) of a fresh source database on the test server."""
    db = f"chsrc_{secrets.token_hex(4)}"
    server.post(f"CREATE DATABASE {db}")
    try:
        for ddl in DDL:
            server.post(ddl.format(db=db))
        for table, data in rows().items():
            body = "".join("\t".join(_tsv(v) for v in row) + "\n" for row in data)
            server.post(f"INSERT INTO {db}.{table} FORMAT TabSeparated", body=body.encode())
        notes = "".join(f"note {i}\n" for i in range(1, 10))
        server.post(f"INSERT INTO {db}.Note FORMAT TabSeparated", body=notes.encode())
        truth = {
            sid: server.query(spec[3], database=db).rows[0][0] for sid, spec in SCENARIOS.items()
        }
        parts = urlsplit(clickhouse_server["BACKINTEL_CLICKHOUSE_DSN"])
        yield f"clickhouse://{parts.netloc}/{db}", db, truth
    finally:
        server.post(f"DROP DATABASE IF EXISTS {db}")


def bi_databases(server: HttpClient) -> set[str]:
    found = server.query("SELECT name FROM system.databases WHERE name LIKE 'bi\\\\_%'")
    return {str(r[0]) for r in found.rows}


def project(folder: Path, binding: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text('[tool.pytest.ini_options]\npythonpath = ["."]\n')
    (folder / "scenarios").mkdir()
    for sid, (question, kind, unit, sql) in SCENARIOS.items():
        body = {
            "id": sid,
            "version": 1,
            "title": sid,
            "question": question,
            "dataset": binding,
            "split": "development",
            "level": 1,
            "family": "invoices",
            "answerable": True,
            "metrics": [{"name": "m", "kind": kind, "unit": unit}],
            "reference": {"sql": sql},
        }
        (folder / "scenarios" / f"{sid}.scenario.yaml").write_text(yaml.safe_dump(body))
    return folder


def texts(folder: Path) -> str:
    """Every file a run and a build wrote (records, run.json, lock files, logs)."""
    out = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.stat().st_size < 20_000_000:
            out.append(path.read_text(errors="replace"))
    return "\n".join(out)


def test_a_run_passes_leaves_no_bi_database_and_never_shows_the_password(
    tmp_path: Path,
    server: HttpClient,
    source: tuple[str, str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reference analyst passes on the source with two trials; the probe drops the
    unkeyed `Note`'s rows by a hash of the whole row (no probe warning); the server holds
    the same `bi_` databases as before the run, and
    the source's password appears in no file the build and the run wrote, nor in their
    output (it is `CLICKHOUSE_PASSWORD`'s here, the DSN in `SRC_CH` names only the user)."""
    dsn, _, _ = source
    parts = urlsplit(dsn)
    password = parts.password or ""
    assert len(password) >= 8
    before = bi_databases(server)
    monkeypatch.setenv("SRC_CH", dsn.replace(f":{password}@", "@"))
    monkeypatch.setenv("CLICKHOUSE_PASSWORD", password)
    folder = project(tmp_path / "p", {"clickhouse": "SRC_CH"})
    build = backintel(folder, "references", "build")
    assert build.returncode == 0, build.stdout + build.stderr
    run = pytest_run(folder, "--run-id", "r", "--trials", "2")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    lines = (folder / "results" / "r" / "records.jsonl").read_text().splitlines()
    got = [(r["scenario_id"], r["outcome"]) for r in map(json.loads, lines)]
    assert sorted(got) == sorted([(sid, "pass") for sid in SCENARIOS] * 2)
    assert "WARNING: the data probe of" not in run.stdout  # `Note` drops rows by row hash
    assert bi_databases(server) == before
    written = texts(folder)
    assert "clickhouse-src_ch" in written  # the world: the binding names the variable
    for text in (written, run.stdout, run.stderr, build.stdout, build.stderr):
        assert password not in text


def test_a_password_in_the_dsn_is_redacted_in_errors_and_records(
    tmp_path: Path, source: tuple[str, str, dict[str, Any]]
) -> None:
    """A DSN with its password written in it: a wrong database, a bad parameter and an
    unreachable port name the DSN with `***`; the store folder's record and the lock file
    built from a scenario file holding the DSN hold no password."""
    from stores.clickhouse.dsn import SOURCE_FILE
    from stores.clickhouse.source import ClickHouseSourceStore

    dsn, db, _ = source
    password = urlsplit(dsn).password or ""
    for bad, why in (
        (dsn.replace(db, "nosuchdb"), "no database 'nosuchdb'"),
        (dsn + "?sslmode=require", "unknown parameter 'sslmode'"),
        (dsn.replace(f":{urlsplit(dsn).port}/", ":1/"), "cannot connect"),
    ):
        with pytest.raises(StoreError) as caught:
            ClickHouseSourceStore(tmp_path / "w", bad).setup_session()
        assert why in str(caught.value)
        assert password not in str(caught.value)
        assert ":***@" in str(caught.value)
    store = ClickHouseSourceStore(tmp_path / "ok", dsn)
    store.setup_session()
    try:
        item = store.provision(DatasetFiles("src", parquet_dir=tmp_path / "none"))
        marker = (tmp_path / "ok" / SOURCE_FILE).read_text()
        assert item.store_id in marker
        assert password not in marker
        item.teardown()
        assert item.store_id not in (tmp_path / "ok" / SOURCE_FILE).read_text()
    finally:
        store.teardown_session()
    folder = project(tmp_path / "p", {"clickhouse": dsn})  # the password in the file itself
    build = backintel(folder, "references", "build")
    assert build.returncode == 0, build.stdout + build.stderr
    lock = (folder / "scenarios" / "backintel.lock.json").read_text()
    assert db in lock
    for text in (lock, build.stdout, build.stderr):
        assert password not in text


REFUSED = [
    "SELECT count() FROM system.tables",
    "SELECT name FROM system.databases",
    "SELECT * FROM system.one",
    "SELECT count() FROM {db}.Invoice",
    "SELECT count() FROM default.Invoice",
    "SELECT count() FROM Invoice WHERE InvoiceId IN {db}.Invoice",
    "SELECT * FROM url('http://127.0.0.1:1/', CSV, 'a String')",
    "SELECT * FROM file('x.csv', CSV, 'a String')",
    "SELECT * FROM remote('127.0.0.1', {db}.Invoice)",
    "SELECT * FROM remote('127.0.0.1', system.one)",
    "SELECT * FROM mysql('127.0.0.1:3306', 'd', 't', 'u', 'p')",
    "SELECT * FROM jdbc('jdbc:x', 'd', 't')",
    "SELECT * FROM s3('http://127.0.0.1:1/b/k.csv', CSV, 'a String')",
    "SELECT * FROM merge('{db}', '.*')",
    "SELECT * FROM cluster('c', {db}.Invoice)",
    "SELECT * FROM numbers(3)",
    "SELECT dictGetString('d', 'a', toUInt64(1))",
    "SELECT count() FROM Invoice SETTINGS readonly = 0",
    "SET readonly = 0",
    "INSERT INTO Invoice VALUES (9999, 1, 'USA', 1.00)",
    "CREATE TABLE T (a Int8) ENGINE = Memory",
    "DROP TABLE Invoice",
    "ALTER TABLE Invoice DELETE WHERE 1",
    "SELECT 1 INTO OUTFILE 'x'",
]


def test_the_item_reads_only_its_database_and_the_server_enforces_readonly(
    tmp_path: Path, server: HttpClient, source: tuple[str, str, dict[str, Any]]
) -> None:
    """Through `run_sql` every statement of `REFUSED` is `QueryRefused` (never a crash) while
    the honest queries return the true values; the same writes sent past the statement check,
    straight to the server on the item's own connection settings, are refused by the server
    (`readonly=1`, code 164); the source's fingerprint is the same after; the item's database
    is gone at teardown."""
    from stores.clickhouse.source import ClickHouseSourceStore

    dsn, db, truth = source
    store = ClickHouseSourceStore(tmp_path / "w", dsn)
    store.setup_session()
    before = store.fingerprint()
    item = store.provision(DatasetFiles("src", parquet_dir=tmp_path / "none"))
    try:
        with item.connect() as session:
            assert session.list_tables() == ["Customer", "Invoice", "InvoiceLine", "Note"]
            for sid, spec in SCENARIOS.items():
                assert session.run_sql(spec[3]).rows == [(truth[sid],)]
            for sql in REFUSED:
                with pytest.raises(QueryRefused):
                    session.run_sql(sql.format(db=db))
        analyst = store.analyst
        found = analyst.query("SELECT value FROM system.settings WHERE name = 'readonly'")
        assert found.rows == [("1",)]
        for write in (
            "SET readonly = 0",
            "SELECT count() FROM Invoice SETTINGS readonly = 0",
            f"INSERT INTO {db}.Note VALUES ('x')",
            f"CREATE TABLE {db}.T (a Int8) ENGINE = Memory",
            f"DROP TABLE {db}.Note",
            "SELECT * FROM numbers(3)",
            f"SELECT * FROM merge('{db}', '.*')",
        ):
            with pytest.raises(ClickHouseHTTPError, match="Code: 164"):
                analyst.post(write, database=item.store_id)
        assert analyst.query("SELECT count() FROM Note", database=item.store_id).rows == [(9,)]
    finally:
        item.teardown()
    assert item.store_id not in bi_databases(server)
    assert store.fingerprint() == before
    store.teardown_session()
    assert store.changes == []


def test_hidden_literals_are_unsupported_through_the_probe_views(
    tmp_path: Path, source: tuple[str, str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`SELECT 91 AS m FROM Invoice LIMIT 1` and `SELECT max(469.58) AS m FROM Invoice` (with
    the true values) reproduce on the source but not on its probes, nor does Python evidence
    printing the value; the honest SQL and Python (through the query channel) pass; the
    unkeyed `Note` drops rows by a hash of the whole row (no probe gap); evidence naming
    the source database is refused, named."""
    dsn, db, truth = source
    monkeypatch.setenv("SRC_CH", dsn)
    folder = project(tmp_path / "p", {"clickhouse": "SRC_CH"})
    assert backintel(folder, "references", "build").returncode == 0

    def score(sid: str, code: str, kind: str = "sql") -> dict[str, Any]:
        value = float(truth[sid]) if sid == "largest-invoice" else truth[sid]
        answer = {
            "status": "answered",
            "metrics": [{"name": "m", "value": value, "unit": SCENARIOS[sid][2]}],
            "evidence": [{"id": "e1", "kind": kind, "code": code, "metrics": ["m"]}],
        }
        path = folder / f"{sid}-{secrets.token_hex(3)}.json"
        path.write_text(json.dumps(answer))
        done = backintel(folder, "score", "--scenario", f"scenarios/{sid}.scenario.yaml", str(path))
        assert done.stdout, done.stderr[-3000:]
        result: dict[str, Any] = json.loads(done.stdout)
        return result

    for sid, (_, _, _, sql) in SCENARIOS.items():
        honest = score(sid, sql)
        assert honest["outcome"] == "pass", honest
        assert honest["probe_gaps"] == []
        value = truth[sid]
        for code in (
            f"SELECT {value} AS m FROM Invoice LIMIT 1",
            f"SELECT max({value}) AS m FROM Invoice",
        ):
            got = score(sid, code)
            assert got["outcome"] == "unsupported_evidence", (code, got)
            assert "does not follow the data" in got["reasons"][0], got["reasons"]
    qualified = score(
        "usa-invoices", SCENARIOS["usa-invoices"][3].replace("Invoice", f"{db}.Invoice")
    )
    assert qualified["outcome"] == "unsupported_evidence", qualified
    assert f"'{db}.Invoice' is outside this store" in qualified["reasons"][0], qualified
    reads = (
        "import json, backintel_store as bs\n"
        "rows = bs.query(\"SELECT count() AS m FROM Invoice WHERE BillingCountry = 'USA'\")\n"
        "print(json.dumps({'m': rows[0]['m']}))\n"
    )
    prints = f"import json\nprint(json.dumps({{'m': {truth['usa-invoices']}}}))\n"
    got_reads = score("usa-invoices", reads, "python")
    assert got_reads["outcome"] == "pass", got_reads
    assert len(got_reads["evidence"][0]["probes"]) == 2, got_reads
    got_prints = score("usa-invoices", prints, "python")
    assert got_prints["outcome"] == "unsupported_evidence", got_prints


WRITER = """
import os, time
from pytest_backintel.analyst_api import AnalystRun
from pytest_backintel.contract import AnalystAnswer
from stores.clickhouse.dsn import ClickHouseDsn

SQL = {sql!r}


class Writer:
    name = "writer"
    kind = "custom"

    def answer(self, task):
        with task.connect() as store:
            value = store.run_sql(SQL).rows[0][0]
        dsn = ClickHouseDsn.parse(os.environ["SRC_CH"])
        dsn.client().post(f"INSERT INTO {{dsn.database}}.Note VALUES ('written')")
        return AnalystRun(AnalystAnswer.model_validate({{
            "status": "answered",
            "metrics": [{{"name": "m", "value": value, "unit": "invoices"}}],
            "evidence": [{{"id": "e1", "kind": "sql", "code": SQL, "metrics": ["m"]}}],
        }}))


def build(config):
    return Writer()
"""


def test_a_write_to_the_source_during_a_trial_is_an_infra_error_naming_it(
    tmp_path: Path, source: tuple[str, str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone inserts into the source while the analyst works: a new part, so the catalog
    signature changes at once; both trials are `infra_error` naming the change, and run.json
    keeps the source change the end-of-run hash found."""
    dsn, db, _ = source
    monkeypatch.setenv("SRC_CH", dsn)
    folder = project(tmp_path / "p", {"clickhouse": "SRC_CH"})
    assert backintel(folder, "references", "build").returncode == 0
    (folder / "writer.py").write_text(WRITER.format(sql=SCENARIOS["usa-invoices"][3]))
    argv = ["-k", "usa", "--analyst", "writer:build", "--run-id", "w", "--trials", "2"]
    run = pytest_run(folder, *argv)
    lines = (folder / "results" / "w" / "records.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["outcome"] for r in records] == ["infra_error", "infra_error"], run.stdout[-3000:]
    summary = json.loads((folder / "results" / "w" / "run.json").read_text())
    (change,) = summary["source_changes"]
    assert db in change, change
    assert f"backintel: WARNING: {change}" in run.stdout
    for record in records:
        reasons = " ".join(r["message"] for r in record["reasons"])
        assert "changed during the" in reasons, reasons
    password = urlsplit(dsn).password or ""
    assert password not in texts(folder) + run.stdout


KILLED = """
import os, signal, sys
from pathlib import Path
from stores.base import DatasetFiles
from stores.clickhouse.source import ClickHouseSourceStore

work = Path(sys.argv[2]) / "stores" / "clickhouse-server" / str(os.getpid())
store = ClickHouseSourceStore(work, sys.argv[1])
store.setup_session()
item = store.provision(DatasetFiles("src", parquet_dir=work / "none"))
print(item.store_id, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_backintel_clean_drops_the_databases_of_a_killed_run(
    tmp_path: Path, server: HttpClient, source: tuple[str, str, dict[str, Any]]
) -> None:
    """A process that made an item's database and was killed (`kill -9`) leaves it; a
    `backintel clean` names and drops it (the password from `CLICKHOUSE_PASSWORD`, as the
    record holds none); a live process's databases are left alone."""
    from stores.clickhouse.source import ClickHouseSourceStore

    dsn, _, _ = source
    data = tmp_path / "data"
    script = tmp_path / "killed.py"
    script.write_text(textwrap.dedent(KILLED))
    done = subprocess.run(
        [sys.executable, str(script), dsn, str(data)], capture_output=True, text=True, check=False
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    left = done.stdout.split()[0]
    assert left in bi_databases(server)
    live = ClickHouseSourceStore(data / "stores" / "clickhouse-server" / str(os.getpid()), dsn)
    live.setup_session()
    mine = live.provision(DatasetFiles("src", parquet_dir=tmp_path / "none"))
    try:
        env = {**os.environ, "CLICKHOUSE_PASSWORD": urlsplit(dsn).password or ""}
        cleaned = subprocess.run(
            [str(Path(sys.executable).parent / "backintel"), "clean", "--data-dir", str(data)],
            capture_output=True,
            text=True,
            check=False,
            env=env,
        )
        assert cleaned.returncode == 0, cleaned.stderr
        assert f"dropped clickhouse {left}" in cleaned.stdout, cleaned.stdout
        assert left not in bi_databases(server)
        assert mine.store_id in bi_databases(server)
    finally:
        mine.teardown()
        live.teardown_session()


def test_a_clickhouse_binding_is_checked_at_collection(tmp_path: Path) -> None:
    """A DSN of another scheme, one naming no database and an unset variable are file:line
    errors, with the password `***`."""
    for raw, why in (
        ("http://u:sekrit99@127.0.0.1:8123/db", "is not a clickhouse://user:password@host"),
        ("clickhouse://u:sekrit99@127.0.0.1:8123", "names no database"),
        ("NO_SUCH_CH_VARIABLE", "environment variable NO_SUCH_CH_VARIABLE"),
    ):
        folder = project(tmp_path / secrets.token_hex(3), {"clickhouse": raw})
        done = backintel(folder, "validate")
        text = done.stdout + done.stderr
        assert done.returncode != 0, text
        assert "usa-invoices.scenario.yaml:" in text, text
        assert why in text, text
        assert "sekrit99" not in text, text


def test_keys_come_from_a_unique_primary_key_then_names_and_money_keeps_its_type(
    tmp_path: Path, server: HttpClient, source: tuple[str, str, dict[str, Any]]
) -> None:
    """A primary key that is unique is the entity key (`Invoice`); one that is not
    (`Payment` sorted by `CustomerId`) gives way to the unique id-like column `PaymentID`;
    a dependant follows a parent by name (`InvoiceLine.InvoiceId`). On a probe, a quarter to
    a half of the rows are gone (their own hash, and their customer's), every kept line's
    invoice is kept, and Decimal, Nullable Decimal and Float columns keep their types while
    their values move."""
    from stores.clickhouse.perturb_views import ch_plan, ch_view_probe
    from stores.clickhouse.source import ClickHouseSourceStore

    dsn, db, _ = source
    server.post(
        f"CREATE TABLE {db}.Payment (CustomerId Int32, PaymentID Int64, "
        "Amount Nullable(Decimal(12, 2)), Rate Float32) ENGINE = MergeTree ORDER BY CustomerId"
    )
    server.post(
        f"INSERT INTO {db}.Payment SELECT toInt32(number % 7), toInt64(number), "
        "if(number % 5 = 0, NULL, toDecimal64(number, 2) / 4), toFloat32(number) / 8 "
        "FROM system.numbers LIMIT 200"
    )
    store = ClickHouseSourceStore(tmp_path / "w", dsn)
    store.setup_session()
    files = DatasetFiles("src", parquet_dir=tmp_path / "none")
    try:
        plans, notes = ch_plan(store, files)
        assert plans["Invoice"].key == ["InvoiceId"]
        assert plans["Customer"].key == ["CustomerId"]
        assert plans["Payment"].key == ["PaymentID"]
        assert (["InvoiceId"], "Invoice", ["InvoiceId"]) in plans["InvoiceLine"].parents
        assert plans["Payment"].scale == ["Amount", "Rate"]
        assert plans["Invoice"].scale == ["Total"]
        assert notes == []
        assert plans["Note"].key == ["Body"]  # no key: the whole row
        item = store.provision(files)
        probe = ch_view_probe(store, files, tmp_path, 1, None, plans, notes)
        try:
            with item.connect() as base, probe.connect() as perturbed:
                for table in ("Invoice", "Payment"):
                    types = base.describe_table(table).columns
                    assert perturbed.describe_table(table).columns == types
                    whole = base.run_sql(f"SELECT count() AS n FROM {table}").rows[0][0]
                    kept = perturbed.run_sql(f"SELECT count() AS n FROM {table}").rows[0][0]
                    assert 0.4 * whole < kept < 0.9 * whole, (table, whole, kept)  # and parents
                orphans = perturbed.run_sql(
                    "SELECT count() AS n FROM InvoiceLine WHERE InvoiceId NOT IN "
                    "(SELECT InvoiceId FROM Invoice)"
                )
                assert orphans.rows == [(0,)]
                sql = "SELECT PaymentID, Amount, Rate FROM Payment ORDER BY PaymentID"
                before = {r[0]: r[1:] for r in base.run_sql(sql).rows}
                after = {r[0]: r[1:] for r in perturbed.run_sql(sql).rows}
                moved = [k for k in after if after[k] != before[k]]
                assert len(moved) > 0.7 * len(after)
                assert all((after[k][0] is None) == (before[k][0] is None) for k in after)
        finally:
            probe.teardown()
            item.teardown()
    finally:
        store.teardown_session()
    assert not any(n in bi_databases(server) for n in (item.store_id, probe.store_id))


def test_a_key_lookup_reads_a_granule_on_the_item_and_on_its_probes(
    tmp_path: Path, server: HttpClient, source: tuple[str, str, dict[str, Any]]
) -> None:
    """Over 10,000 rows in granules of 64, `WHERE ReadingId = 5` reads at most two granules
    through the item's `Merge` table and through a probe's view (sent with predicate
    pushdown); the same statement on the probe without pushdown reads every row, which is
    what a view alone costs on 18.16. Rows read come from the server's `query_log`."""
    from stores.clickhouse.perturb_views import ch_plan, ch_view_probe
    from stores.clickhouse.source import ClickHouseSourceStore

    dsn, db, _ = source
    server.post(
        f"CREATE TABLE {db}.Reading (ReadingId Int64, Value Float64) ENGINE = MergeTree "
        "ORDER BY ReadingId SETTINGS index_granularity = 64"
    )
    server.post(
        f"INSERT INTO {db}.Reading SELECT toInt64(number), number / 3 "
        "FROM system.numbers LIMIT 10000"
    )
    store = ClickHouseSourceStore(tmp_path / "w", dsn)
    store.setup_session()
    files = DatasetFiles("src", parquet_dir=tmp_path / "none")
    assert store.probe_analyst is not None
    for client in (store.analyst, store.probe_analyst):  # log them: settings before readonly
        client.settings = {"log_queries": "1", **client.settings}

    def read_rows(mark: str) -> int:
        server.post("SYSTEM FLUSH LOGS")
        found = server.query(
            "SELECT max(read_rows) FROM system.query_log WHERE type = 2 "
            f"AND query LIKE '%{mark}%' AND query NOT LIKE '%query_log%'"
        )
        return int(found.rows[0][0])

    item = store.provision(files)
    probe = ch_view_probe(store, files, tmp_path, 1, None, *ch_plan(store, files))
    try:
        lookup = "SELECT count() AS n, '{mark}' AS k FROM Reading WHERE ReadingId = 5"
        with item.connect() as base, probe.connect() as perturbed:
            base.run_sql(lookup.format(mark="mark_item"))
            perturbed.run_sql(lookup.format(mark="mark_probe"))
        store.analyst.query(lookup.format(mark="mark_plain"), database=probe.store_id)
        assert read_rows("mark_item") <= 128
        assert read_rows("mark_probe") <= 128
        assert read_rows("mark_plain") == 10_000
    finally:
        probe.teardown()
        item.teardown()
        store.teardown_session()
