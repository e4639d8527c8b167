"""A PostgreSQL source used in place (`stores.postgres.source`): runs that pass while another
session holds the source open, with a password (in the DSN, through `PGPASSWORD`) on a server
that checks it, and that leave nothing behind in the source's catalog; hidden literals are
`unsupported_evidence` through the probe's temporary views, a schema-qualified name cannot
read past them, and a write to the source during a trial is `infra_error`, named.

The sources are databases of their own with CamelCase declared keys (`"Customer"`,
`"Invoice"` with `"CustomerId"` and a `numeric(10,2)` `"Total"`), dropped after each test.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_own_data import ADMIN_DSN, _admin, backintel, pytest_run
from test_probe_keys import rows

from stores.base import DatasetFiles, QueryError, StoreError
from stores.owner import Owner

DDL = [
    'CREATE TABLE "Customer" ("CustomerId" integer PRIMARY KEY, "FullName" text NOT NULL, '
    '"Country" text NOT NULL)',
    'CREATE TABLE "Invoice" ("InvoiceId" integer PRIMARY KEY, "CustomerId" integer NOT NULL '
    'REFERENCES "Customer" ("CustomerId"), "BillingCountry" text NOT NULL, '
    '"Total" numeric(10,2) NOT NULL)',
    'CREATE TABLE "InvoiceLine" ("InvoiceLineId" integer PRIMARY KEY, "InvoiceId" integer '
    'NOT NULL REFERENCES "Invoice" ("InvoiceId"), "UnitPrice" numeric(10,2) NOT NULL, '
    '"Quantity" integer NOT NULL)',
    'CREATE TABLE "Note" ("Body" text NOT NULL)',  # no key at all: a probe gap, named
    """CREATE VIEW "UsaInvoice" AS SELECT * FROM "Invoice" WHERE "BillingCountry" = 'USA'""",
]
SCENARIOS = {
    "usa-invoices": (
        "How many invoices were billed to the USA?",
        "count",
        "invoices",
        """SELECT COUNT(*) AS m FROM "Invoice" WHERE "BillingCountry" = 'USA'""",
    ),
    "largest-invoice": (
        "What is the largest invoice total?",
        "currency",
        "USD",
        'SELECT MAX("Total") AS m FROM "Invoice"',
    ),
}


def fill(dsn: str) -> dict[str, Any]:
    """The tables and rows in the database at `dsn`; the true values of `SCENARIOS`."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as con:
        for ddl in DDL:
            con.execute(ddl)
        for table, data in rows().items():
            marks = ", ".join(["%s"] * len(data[0]))
            with con.cursor() as cur:
                cur.executemany(f'INSERT INTO "{table}" VALUES ({marks})', data)
        con.execute("""INSERT INTO "Note" SELECT 'note ' || i FROM generate_series(1, 9) i""")
        return {sid: con.execute(spec[3]).fetchone()[0] for sid, spec in SCENARIOS.items()}  # type: ignore[index]


@pytest.fixture
def source() -> Iterator[tuple[str, dict[str, Any]]]:
    """(DSN, true values) of a fresh source database on the shared server."""
    name = f"pgsrc_{secrets.token_hex(4)}"
    admin = _admin()
    admin.execute(f'CREATE DATABASE "{name}"')  # type: ignore[attr-defined]
    dsn = ADMIN_DSN.rsplit("/", 1)[0] + f"/{name}"
    try:
        yield dsn, fill(dsn)
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[attr-defined]
        admin.close()  # type: ignore[attr-defined]


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


def catalog(dsn: str) -> dict[str, Any]:
    """What a run could leave in the source's catalog (temporary schemas aside, which
    PostgreSQL keeps for reuse) and the harness's SELECT-only roles on the server."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as con:
        relations = con.execute(
            "SELECT n.nspname, c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON "
            "n.oid = c.relnamespace WHERE c.relpersistence <> 't' ORDER BY 1, 2"
        ).fetchall()
        schemas = con.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_temp\\_%' "
            "AND nspname NOT LIKE 'pg\\_toast\\_temp\\_%' ORDER BY 1"
        ).fetchall()
        temporary = con.execute("SELECT count(*) FROM pg_class WHERE relpersistence = 't'")
        roles = [
            name
            for name, comment in con.execute(
                "SELECT rolname, shobj_description(oid, 'pg_authid') FROM pg_roles "
                "WHERE rolname LIKE 'bi\\_%' "
                "AND pg_has_role(rolname, 'pg_read_all_data', 'MEMBER') ORDER BY 1"
            ).fetchall()
            if (owner := Owner.from_comment(comment)) is None or owner.is_gone()
        ]  # a live process's roles are another test's, running beside this one (xdist)
        settings = con.execute(
            "SELECT count(*) FROM pg_db_role_setting WHERE setdatabase = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchone()
        acl = con.execute("SELECT relname, relacl::text FROM pg_class WHERE relacl IS NOT NULL")
        return {
            "relations": relations,
            "schemas": schemas,
            "temporary": temporary.fetchone(),
            "roles": roles,
            "role settings": settings,
            "acl": sorted(acl.fetchall()),
        }


def settled(dsn: str, before: dict[str, Any]) -> dict[str, Any]:
    """The catalog once the run's backends have exited (they drop their temporary views
    just after the client is gone)."""
    deadline = time.monotonic() + 10
    while (now := catalog(dsn)) != before and time.monotonic() < deadline:
        time.sleep(0.1)
    return now


def outcomes(folder: Path, run_id: str) -> dict[str, str]:
    lines = (folder / "results" / run_id / "records.jsonl").read_text().splitlines()
    return {r["scenario_id"]: r["outcome"] for r in map(json.loads, lines)}


def test_a_run_passes_while_another_session_holds_the_source_open(
    tmp_path: Path, source: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An open connection sits idle in a transaction on the source for the whole build and
    run (CREATE DATABASE ... TEMPLATE, as before, could not start then); the run passes with
    the reference analyst, names the table its probe keeps whole, and leaves the source's
    catalog (relations, schemas, temporary objects, grants, role settings) and the server's
    roles as they were."""
    import psycopg

    dsn, _ = source
    before = catalog(dsn)
    monkeypatch.setenv("SRC_DSN", dsn)
    folder = project(tmp_path / "p", {"postgres": "SRC_DSN"})
    with psycopg.connect(dsn) as holder:
        holder.execute('SELECT count(*) FROM "Invoice"')  # a transaction left open
        build = backintel(folder, "references", "build")
        assert build.returncode == 0, build.stdout + build.stderr
        run = pytest_run(folder, "--run-id", "r", "--trials", "2")
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert holder.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        holder.execute("SELECT 1")  # still open, never disturbed
    assert outcomes(folder, "r") == dict.fromkeys(SCENARIOS, "pass")
    assert "WARNING: the data probe of" not in run.stdout  # `Note` drops rows by row hash
    assert settled(dsn, before) == before


def test_the_items_role_reads_everything_and_writes_nothing_and_is_dropped(
    tmp_path: Path, source: tuple[str, dict[str, Any]]
) -> None:
    from stores.postgres.source import PostgresSourceStore

    dsn, truth = source
    store = PostgresSourceStore(tmp_path / "w", dsn)
    store.setup_session()
    item = store.provision(DatasetFiles("src", parquet_dir=tmp_path / "none"))
    try:
        with item.connect() as session:
            ((user, member, read_only, timeout, jit),) = session.run_sql(
                "SELECT current_user, pg_has_role('pg_read_all_data', 'MEMBER'), "
                "current_setting('transaction_read_only'), current_setting('statement_timeout'), "
                "current_setting('jit')"
            ).rows
            assert (user, member, read_only, timeout, jit) == (item.role, True, "on", "10s", "off")
            assert session.run_sql(SCENARIOS["usa-invoices"][3]).rows == [(truth["usa-invoices"],)]
            session.run_sql("SELECT set_config('default_transaction_read_only', 'off', false)")
            for write in (
                'WITH d AS (DELETE FROM "Note" RETURNING 1) SELECT count(*) FROM d',
                'CREATE TABLE "X" (a int)',
                'SELECT * INTO "Y" FROM "Note"',
            ):
                with pytest.raises(QueryError):
                    session.run_sql(write)
    finally:
        item.teardown()
        store.teardown_session()
    assert item.role.startswith("bi_")
    assert item.role.endswith("_ro")
    assert item.role not in [r for (r,) in catalog(dsn)["roles"]]
    assert store.changes == []


def test_hidden_literals_are_unsupported_through_the_probe_views(
    tmp_path: Path, source: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`SELECT 91 AS m FROM "Invoice" LIMIT 1` and `SELECT MAX(469.58) AS m FROM "Invoice"`
    (with the true values) reproduce on the source but not on its probes; a schema-qualified
    name is refused on the probe, naming the table; the honest queries pass, also through a
    view of the source's own (recreated over the probe's views); the unkeyed `Note` table
    drops rows by a hash of the whole row, so there is no probe gap."""
    dsn, truth = source
    monkeypatch.setenv("SRC_DSN", dsn)
    folder = project(tmp_path / "p", {"postgres": "SRC_DSN"})
    assert backintel(folder, "references", "build").returncode == 0

    def score(sid: str, code: str) -> dict[str, Any]:
        value = float(truth[sid]) if sid == "largest-invoice" else truth[sid]
        answer = {
            "status": "answered",
            "metrics": [{"name": "m", "value": value, "unit": SCENARIOS[sid][2]}],
            "evidence": [{"id": "e1", "kind": "sql", "code": code, "metrics": ["m"]}],
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
            f'SELECT {value} AS m FROM "Invoice" LIMIT 1',
            f'SELECT MAX({value}) AS m FROM "Invoice"',
        ):
            got = score(sid, code)
            assert got["outcome"] == "unsupported_evidence", (code, got)
            assert "does not follow the data" in got["reasons"][0], got["reasons"]
    through_view = 'SELECT COUNT(*) AS m FROM "UsaInvoice"'  # the source's own view
    assert score("usa-invoices", through_view)["outcome"] == "pass"
    got = score("usa-invoices", f'SELECT {truth["usa-invoices"]} AS m FROM "UsaInvoice" LIMIT 1')
    assert got["outcome"] == "unsupported_evidence", got
    for spelled in ('public."Invoice"', '"public"."Invoice"', 'PUBLIC."Invoice"'):
        qualified = SCENARIOS["usa-invoices"][3].replace('"Invoice"', spelled)
        got = score("usa-invoices", qualified)
        assert got["outcome"] == "unsupported_evidence", got
        error = got["evidence"][0]["probes"][0]["error"]
        assert "public.Invoice is read past the probe's view" in error, error


def test_python_evidence_reads_the_source_and_its_probes_through_the_query_channel(
    tmp_path: Path, source: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python evidence over a PostgreSQL source has no file to read: it reads through the
    sandbox's query channel (`bs.query`), which on a probe runs in the probe's own session, so
    a program that reads the data passes and one that prints the true value is unsupported."""
    dsn, truth = source
    monkeypatch.setenv("SRC_DSN", dsn)
    folder = project(tmp_path / "p", {"postgres": "SRC_DSN"})
    assert backintel(folder, "references", "build").returncode == 0
    value = truth["usa-invoices"]
    reads = (
        "import json, backintel_store as bs\n"
        'rows = bs.query("SELECT COUNT(*) AS m FROM \\"Invoice\\" '
        'WHERE \\"BillingCountry\\" = \'USA\'")\n'
        "print(json.dumps({'m': rows[0]['m']}))\n"
    )
    prints = f"import json\nprint(json.dumps({{'m': {value}}}))\n"
    outcomes = {}
    for name, code in (("reads", reads), ("prints", prints)):
        answer = {
            "status": "answered",
            "metrics": [{"name": "m", "value": value, "unit": "invoices"}],
            "evidence": [{"id": "p1", "kind": "python", "code": code, "metrics": ["m"]}],
        }
        path = folder / f"{name}.json"
        path.write_text(json.dumps(answer))
        scenario = "scenarios/usa-invoices.scenario.yaml"
        done = backintel(folder, "score", "--scenario", scenario, str(path))
        assert done.stdout, done.stderr[-3000:]
        outcomes[name] = json.loads(done.stdout)
    assert outcomes["reads"]["outcome"] == "pass", outcomes["reads"]
    assert len(outcomes["reads"]["evidence"][0]["probes"]) == 2, outcomes["reads"]
    assert outcomes["prints"]["outcome"] == "unsupported_evidence", outcomes["prints"]


WRITER = """
import os, time
import psycopg
from pytest_backintel.analyst_api import AnalystRun
from pytest_backintel.contract import AnalystAnswer

SQL = {sql!r}


class Writer:
    name = "writer"
    kind = "custom"

    def answer(self, task):
        with task.connect() as store:
            value = store.run_sql(SQL).rows[0][0]
        with psycopg.connect(os.environ["SRC_DSN"], autocommit=True) as other:
            other.execute('DELETE FROM "Note" WHERE "Body" = \\'note 1\\'')
        time.sleep(1.5)  # the writer's counters reach pg_stat_all_tables within ~1 s
        return AnalystRun(AnalystAnswer.model_validate({{
            "status": "answered",
            "metrics": [{{"name": "m", "value": value, "unit": "invoices"}}],
            "evidence": [{{"id": "e1", "kind": "sql", "code": SQL, "metrics": ["m"]}}],
        }}))


def build(config):
    return Writer()
"""


def test_a_write_to_the_source_during_a_trial_is_an_infra_error_naming_it(
    tmp_path: Path, source: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone writes the source while the analyst works: the trial is `infra_error`, its
    reason naming the change (the store changed during the trial, or, when the probes are
    built after the write, the source that changed during the run); the next trial (a new
    item) is refused at provisioning, naming the source, whose content no longer matches the
    run's first read of it."""
    dsn, _ = source
    monkeypatch.setenv("SRC_DSN", dsn)
    folder = project(tmp_path / "p", {"postgres": "SRC_DSN"})
    assert backintel(folder, "references", "build").returncode == 0
    (folder / "writer.py").write_text(WRITER.format(sql=SCENARIOS["usa-invoices"][3]))
    argv = ["-k", "usa", "--analyst", "writer:build", "--run-id", "w", "--trials", "2"]
    run = pytest_run(folder, *argv)
    lines = (folder / "results" / "w" / "records.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["outcome"] for r in records] == ["infra_error", "infra_error"], run.stdout[-3000:]
    summary = json.loads((folder / "results" / "w" / "run.json").read_text())
    (change,) = summary["source_changes"]  # the end of the run hashed the source again
    assert "pgsrc_" in change, change
    assert change in summary["warnings"]
    assert f"backintel: WARNING: {change}" in run.stdout
    for record in records:
        reasons = " ".join(r["message"] for r in record["reasons"])
        assert "changed during the" in reasons, reasons  # the trial, or the run
        assert "pgsrc_" in reasons or "the store changed during the trial" in reasons, reasons


def test_a_named_role_must_be_read_only_and_a_bi_name_is_a_file_line_error(
    tmp_path: Path, source: tuple[str, dict[str, Any]]
) -> None:
    import psycopg

    from stores.postgres.source import PostgresSourceStore

    dsn, _ = source
    role = f"writer_{secrets.token_hex(3)}"
    with psycopg.connect(dsn, autocommit=True) as con:
        con.execute(f'CREATE ROLE "{role}" LOGIN IN ROLE pg_read_all_data')
        con.execute(f'GRANT INSERT ON "Note" TO "{role}"')
    try:
        store = PostgresSourceStore(tmp_path / "w", dsn, role)
        with pytest.raises(StoreError, match=r"not read-only .*public\.Note \(INSERT\)"):
            store.provision(DatasetFiles("src", parquet_dir=tmp_path / "none"))
        store.teardown_session()
    finally:
        with psycopg.connect(dsn, autocommit=True) as con:
            con.execute(f'DROP OWNED BY "{role}"')
            con.execute(f'DROP ROLE "{role}"')
    folder = project(tmp_path / "p", {"postgres": dsn, "role": "bi_mine"})
    done = backintel(folder, "validate")
    assert done.returncode != 0
    text = done.stdout + done.stderr
    assert "largest-invoice.scenario.yaml:" in text, text
    assert "dataset.role" in text, text
    assert "names starting with bi_ are the harness's own" in text, text


# -- a server that checks passwords -------------------------------------------------------


@pytest.fixture(scope="module")
def scram_server() -> Iterator[tuple[str, int]]:
    """A private cluster that checks passwords (SCRAM) on 127.0.0.1 and trusts only its own
    socket: (socket folder, port). The shared server trusts 127.0.0.1, so a password sent to
    it proves nothing; this one refuses a wrong or missing password."""
    from stores.postgres.cluster import RUN_AS, find_binary, free_port

    try:
        initdb, pg_ctl = find_binary("initdb"), find_binary("pg_ctl")
    except StoreError as exc:
        pytest.skip(str(exc))
    root = Path(tempfile.mkdtemp(prefix="backintel-scram-"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        import pwd

        user = pwd.getpwnam(RUN_AS)
        os.chown(root, user.pw_uid, user.pw_gid)
        prefix = ["runuser", "-u", RUN_AS, "--"]
    port = free_port()
    data = root / "data"
    try:
        subprocess.run(
            [*prefix, initdb, "-D", str(data), "-U", "postgres", "--auth-local=trust",
             "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync", "--no-instructions"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            [*prefix, pg_ctl, "-D", str(data), "-o", options, "-l", str(root / "log"), "-w",
             "start"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        yield str(root), port
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, check=False)  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


def test_passwords_in_the_dsn_and_in_pgpassword_on_a_server_that_checks_them(
    tmp_path: Path, scram_server: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a SCRAM-only server: (a) a DSN with its password in the URL, whose user may create
    roles (the harness makes a role with a random password per item); (b) a DSN without a
    password, `PGPASSWORD` set, and `role:` naming that read-only user. Both runs pass, the
    password appears in no output, record, run.json, lock file or folder name, a wrong
    password fails with the password redacted, and the catalog shows nothing left behind."""
    import psycopg

    socket_dir, port = scram_server
    local = f"postgresql://postgres@/postgres?host={socket_dir}&port={port}"
    db, admin_pw = f"src_{secrets.token_hex(3)}", secrets.token_hex(8)
    reader_pw = "rd-" + secrets.token_hex(8)
    with psycopg.connect(local, autocommit=True) as con:
        con.execute(f'CREATE DATABASE "{db}"')
        for role, pw, more in (("pwadmin", admin_pw, "CREATEROLE"), ("pwreader", reader_pw, "")):
            con.execute(f"CREATE ROLE {role} LOGIN {more} PASSWORD '{pw}' IN ROLE pg_read_all_data")
    fill(local.replace("/postgres?", f"/{db}?"))
    url = f"postgresql://pwadmin:{admin_pw}@127.0.0.1:{port}/{db}?sslmode=disable"
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(url.replace(admin_pw, "wrong")).close()  # the server checks
    before = catalog(url)

    monkeypatch.setenv("SRC_DSN", url)
    monkeypatch.setenv("BACKINTEL_DATA_DIR", str(tmp_path / "data"))  # its folder names too
    a = project(tmp_path / "a", {"postgres": "SRC_DSN"})
    build = backintel(a, "references", "build")
    assert build.returncode == 0, build.stdout + build.stderr
    run_a = pytest_run(a, "--run-id", "a")
    assert run_a.returncode == 0, run_a.stdout[-3000:] + run_a.stderr[-3000:]
    assert outcomes(a, "a") == dict.fromkeys(SCENARIOS, "pass")

    monkeypatch.setenv("SRC_DSN", f"postgresql://pwreader@127.0.0.1:{port}/{db}")
    monkeypatch.setenv("PGPASSWORD", reader_pw)
    b = project(tmp_path / "b", {"postgres": "SRC_DSN", "role": "pwreader"})
    assert backintel(b, "references", "build").returncode == 0
    run_b = pytest_run(b, "--run-id", "b")
    assert run_b.returncode == 0, run_b.stdout[-3000:] + run_b.stderr[-3000:]
    assert outcomes(b, "b") == dict.fromkeys(SCENARIOS, "pass")
    monkeypatch.setenv("PGPASSWORD", "wrong")
    wrong = pytest_run(b, "--run-id", "b2")
    assert wrong.returncode != 0
    assert "password authentication failed" in wrong.stdout + wrong.stderr

    literal = {"postgres": url}  # the password written in the scenario file itself
    c = project(tmp_path / "c", literal)
    monkeypatch.delenv("PGPASSWORD")
    assert backintel(c, "references", "build").returncode == 0
    run_c = pytest_run(c, "--run-id", "c")
    assert run_c.returncode == 0, run_c.stdout[-3000:]
    assert any((tmp_path / "data" / "stores").iterdir())
    for folder in (a, b, c, tmp_path / "data"):
        for path in folder.rglob("*"):
            assert admin_pw not in str(path)
            assert reader_pw not in str(path)
            if path.is_file() and "scenario.yaml" not in path.name:
                text = path.read_bytes()
                assert admin_pw.encode() not in text, path
                assert reader_pw.encode() not in text, path
    for done in (run_a, run_b, wrong, run_c, build):
        assert admin_pw not in done.stdout + done.stderr
        assert reader_pw not in done.stdout + done.stderr
    assert settled(url, before) == before


KILLED = """
import os, sys, time
from pathlib import Path
from stores.base import DatasetFiles
from stores.postgres.source import PostgresSourceStore

store = PostgresSourceStore(Path(sys.argv[1]) / "stores" / "pg" / str(os.getpid()), sys.argv[2])
store.setup_session()
item = store.provision(DatasetFiles("src", parquet_dir=Path(sys.argv[1])))
session = item.connect()
print(item.role, flush=True)
time.sleep(600)
"""


def test_after_kill_9_backintel_clean_drops_the_items_role(
    tmp_path: Path, source: tuple[str, dict[str, Any]]
) -> None:
    """A process that made an item's role (and holds a session as it) is killed with
    SIGKILL: its role stays, marked with its owner; `backintel clean` drops it, because the
    store folder it left names the source's server and the role's comment names a process
    that is gone. (On this shared server another run's session-start sweep may drop it
    first, so what is checked is that it is gone after `backintel clean`.)"""
    import signal
    import sys

    dsn, _ = source
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(data), dsn], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    role = proc.stdout.readline().strip()
    assert role.startswith("bi_"), role
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    env = {**os.environ, "BACKINTEL_DATA_DIR": str(data)}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "backintel"), "clean"],
        capture_output=True, text=True, env=env, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    # "dropped postgres <role>" unless another run's session-start sweep came first
    assert (role,) not in catalog(dsn)["roles"]
    assert not (data / "stores" / "pg").exists() or not any((data / "stores" / "pg").iterdir())


def test_the_signature_keys_the_content_hash_and_a_rolled_back_write_changes_nothing(
    tmp_path: Path, source: tuple[str, dict[str, Any]]
) -> None:
    """Per check, only the catalog signature is read; a committed write moves the write
    counters (once the writer publishes them: at once when its session ends, else within 1
    to 10 s), so the content is hashed again and differs; a rolled back write moves the
    counters too, but the content hash, recomputed, is the same."""
    import psycopg

    from stores.postgres import signature as pg_signature
    from stores.postgres.source import PostgresSourceStore

    dsn, _ = source
    store = PostgresSourceStore(tmp_path / "w", dsn)
    first = store.fingerprint()
    with psycopg.connect(dsn, autocommit=True) as other:
        signed = pg_signature.signature(other)[1]
        with other.transaction(force_rollback=True):
            other.execute("""INSERT INTO "Note" VALUES ('never committed')""")
        deadline = time.monotonic() + 5
        while pg_signature.signature(other)[1] == signed and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pg_signature.signature(other)[1] != signed  # the counters moved
        assert store.fingerprint() == first  # the content did not
        other.execute("""UPDATE "Invoice" SET "Total" = "Total" + 1 WHERE "InvoiceId" = 7""")
        deadline = time.monotonic() + 15  # a backend that published < 1 s ago waits 10 s
        while (after := store.fingerprint()) == first and time.monotonic() < deadline:
            time.sleep(0.1)
    assert after.logical != first.logical
    assert after.physical != first.physical
    store.teardown_session()


def test_probe_views_drop_rows_by_key_keep_foreign_keys_and_need_temporary(
    tmp_path: Path, source: tuple[str, dict[str, Any]]
) -> None:
    """The probe's views, read directly: about one invoice in four is gone, no invoice
    points at a dropped customer, totals moved but keep two decimals, the source is not read
    past them; and a role without TEMPORARY on the database gets a message saying so."""
    import psycopg

    from stores.postgres.perturb_views import pg_plan, pg_view_probe
    from stores.postgres.source import PostgresSourceStore

    dsn, _ = source
    files = DatasetFiles("src", parquet_dir=tmp_path / "none")
    store = PostgresSourceStore(tmp_path / "w", dsn)
    plans, notes = pg_plan(store, files)
    assert plans["Invoice"].key == ["InvoiceId"]
    assert plans["Invoice"].parents == [(["CustomerId"], "Customer", ["CustomerId"])]
    assert plans["Invoice"].scale == ["Total"]
    assert notes == []
    assert plans["Note"].key == ["Body"]  # no key: the whole row
    probe = pg_view_probe(store, files, tmp_path, 1, None, plans, notes)
    try:
        with probe.connect() as session:
            ((count, orphans, cents),) = session.run_sql(
                'SELECT COUNT(*), (SELECT COUNT(*) FROM "Invoice" i WHERE NOT EXISTS (SELECT 1 '
                'FROM "Customer" c WHERE c."CustomerId" = i."CustomerId")), '
                'MAX(scale("Total")) FROM "Invoice"'
            ).rows
            assert 412 * 0.5 < count < 412 * 0.9
            assert (orphans, cents) == (0, 2)
            with pytest.raises(QueryError, match=r"public\.Customer is read past"):
                session.run_sql('SELECT COUNT(*) FROM public."Customer"')
    finally:
        probe.teardown()
    name = dsn.rsplit("/", 1)[1]
    role = f"reader_{secrets.token_hex(3)}"
    with psycopg.connect(dsn, autocommit=True) as con:
        con.execute(f'CREATE ROLE "{role}" LOGIN IN ROLE pg_read_all_data')
        con.execute(f'REVOKE TEMPORARY ON DATABASE "{name}" FROM PUBLIC')
    try:
        named = PostgresSourceStore(tmp_path / "n", dsn, role)
        probe = pg_view_probe(named, files, tmp_path, 1, None, plans, notes)
        with pytest.raises(StoreError, match="may not create temporary objects"):
            probe.connect()
        probe.teardown()
        named.teardown_session()
    finally:
        with psycopg.connect(dsn, autocommit=True) as con:
            con.execute(f'DROP ROLE "{role}"')
    store.teardown_session()


def test_a_content_hash_is_kept_on_disk_for_the_next_process_and_read_again_at_the_end(
    tmp_path: Path, source: tuple[str, dict[str, Any]]
) -> None:
    """A second store of the same source (the next process: `references build`, then the run)
    takes the content hash its first store left on disk for the same catalog signature, without
    scanning the tables; a hash left stale under that signature is caught by the end of run's
    uncached hash."""
    from stores.postgres import source as postgres_source
    from stores.postgres.source import PostgresSourceStore

    dsn, _ = source
    shared = tmp_path / "shared"
    first = PostgresSourceStore(tmp_path / "a", dsn, cache_dir=shared).fingerprint()
    (kept,) = list((shared / "hashes").iterdir())
    assert kept.read_text() == first.logical
    postgres_source._HASHES.clear()  # a new process knows only the disk
    kept.write_text("0" * 64)  # as if the content had changed under the same signature
    store = PostgresSourceStore(tmp_path / "b", dsn, cache_dir=shared)
    assert store.fingerprint().logical == "0" * 64  # read from the disk, no scan
    store._served = True  # an item ran on it
    store.teardown_session()
    assert len(store.changes) == 1
    assert "changed during the run" in store.changes[0]
    postgres_source._HASHES.clear()
    kept.unlink()
    fresh = PostgresSourceStore(tmp_path / "c", dsn, cache_dir=shared)
    assert fresh.fingerprint().logical == first.logical
    fresh.teardown_session()


def test_row_counts_are_shared_per_catalog_signature_and_counted_again_after_a_write(
    tmp_path: Path, source: tuple[str, dict[str, Any]]
) -> None:
    """`describe_table` counts a table once per state of the source (a count scans the whole
    table); once a write moves the signature the next item counts again."""
    import psycopg

    from stores.postgres.source import PostgresSourceStore

    dsn, _ = source
    store = PostgresSourceStore(tmp_path / "w", dsn)
    store.setup_session()
    files = DatasetFiles("src", parquet_dir=tmp_path / "none")
    first = store.provision(files)
    try:
        with first.connect() as session:
            notes = session.describe_table("Note").row_count
        assert notes == 9
        with psycopg.connect(dsn, autocommit=True) as other:
            other.execute("""INSERT INTO "Note" VALUES ('one more')""")
        with first.connect() as session:  # kept for the state the last check read
            assert session.describe_table("Note").row_count == 9
        deadline = time.monotonic() + 15  # the writer's counters reach the signature
        while store.row_counts() is not None and time.monotonic() < deadline:
            before = store._signed
            store.fingerprint()
            if store._signed != before:
                break
            time.sleep(0.2)
        with first.connect() as session:
            assert session.describe_table("Note").row_count == 10
    finally:
        first.teardown()
        store.teardown_session()
