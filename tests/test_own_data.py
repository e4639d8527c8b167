"""Data of your own: the tutorial's scenarios bound to a PostgreSQL database, a Parquet folder,
a DuckDB file and a CSV folder; locks refused on other data; validate and --store errors."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_own_data_tutorial import ANSWERABLE, SUITE, UNANSWERABLE, outcomes, tutorial

from pytest_backintel.cli.commands import main
from pytest_backintel.collect.loading import load_scenario_file
from pytest_backintel.collect.user_data import user_source

BIN = Path(sys.executable).parent
ADMIN_DSN = os.environ.get("BACKINTEL_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
ALL = ANSWERABLE | UNANSWERABLE


def project(folder: Path, binding: str | None = None) -> Path:
    """The tutorial's files in `folder` (scenarios re-bound to `binding` when given) and its
    SQLite file."""
    files, _ = tutorial()
    for name, body in files.items():
        if binding is not None and name.endswith(".scenario.yaml"):
            body = body.replace("dataset: {sqlite: ../shop.sqlite}", f"dataset: {binding}")
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        with (folder / name).open("a") as f:
            f.write(body)
    subprocess.run([sys.executable, "make_shop.py"], cwd=folder, check=True)
    return folder


def backintel(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "backintel"), *args], cwd=folder, capture_output=True, text=True, check=False
    )


def pytest_run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "pytest"), "scenarios", "-p", "no:xdist", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def shop_rows() -> list[tuple[object, ...]]:
    con = sqlite3.connect(":memory:")
    files, _ = tutorial()
    con.executescript(files["make_shop.py"].split('"""')[1])
    rows = con.execute("SELECT * FROM orders ORDER BY id").fetchall()
    con.close()
    return rows


# -- PostgreSQL ------------------------------------------------------------------------------


def _admin() -> object:
    psycopg = pytest.importorskip("psycopg")
    try:
        return psycopg.connect(ADMIN_DSN, autocommit=True, connect_timeout=5)
    except psycopg.Error as exc:
        if "postgres" in os.environ.get("BACKINTEL_REQUIRE", ""):
            pytest.fail(f"PostgreSQL is required but unreachable: {exc}")
        pytest.skip(f"no PostgreSQL at {ADMIN_DSN}: {exc}")


@contextlib.contextmanager
def postgres_source(
    prefix: str, ddl: list[str], rows: dict[str, list[tuple[object, ...]]]
) -> Iterator[str]:
    """The DSN of a PostgreSQL database of its own (`prefix_<random>`, dropped after) holding
    the tables `ddl` creates, filled with `rows` per table."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    admin = _admin()
    admin.execute(f'CREATE DATABASE "{name}"')  # type: ignore[attr-defined]
    dsn = ADMIN_DSN.rsplit("/", 1)[0] + f"/{name}"
    try:
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as con:
            for statement in ddl:
                con.execute(statement)  # type: ignore[arg-type]
            for table, data in rows.items():
                marks = ", ".join(["%s"] * len(data[0]))
                with con.cursor() as cur:
                    cur.executemany(f"INSERT INTO {table} VALUES ({marks})", data)  # type: ignore[arg-type]
        yield dsn
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[attr-defined]
        admin.close()  # type: ignore[attr-defined]


@pytest.fixture
def shop_postgres() -> Iterator[str]:
    """A source database created for this test (dropped after), with the shop's types."""
    ddl = [
        "CREATE TABLE customers (id integer PRIMARY KEY, name text NOT NULL, "
        "country text NOT NULL)",
        "CREATE TABLE orders (id integer PRIMARY KEY, customer_id integer NOT NULL "
        "REFERENCES customers (id), ordered_on date NOT NULL, status text NOT NULL, "
        "amount_eur numeric(10,2) NOT NULL)",
    ]
    customers: list[tuple[object, ...]] = [(1, "Ada", "DE"), (2, "Bo", "FR"), (3, "Cy", "DE")]
    with postgres_source("shop_src", ddl, {"customers": customers, "orders": shop_rows()}) as dsn:
        yield dsn


def test_the_tutorial_on_an_existing_postgres_database(
    tmp_path: Path, shop_postgres: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = project(tmp_path, "{postgres: SHOP_DSN}")
    monkeypatch.setenv("SHOP_DSN", shop_postgres)
    scenario = load_scenario_file(folder / "scenarios" / "delivered-orders.scenario.yaml")
    source = user_source(scenario.dataset)
    assert source is not None
    from stores.postgres.source import PostgresSourceStore

    source_store = PostgresSourceStore(tmp_path / "w", shop_postgres)
    before = source_store.source_fingerprint()
    item = source_store.provision(source.ensure_built(tmp_path))
    try:
        with item.connect() as session:
            info = session.describe_table("orders")
            types = {c.name: (c.type, c.nullable) for c in info.columns}
        assert types["ordered_on"] == ("date", False)
        assert types["amount_eur"] == ("numeric(10,2)", False)
        assert item.fingerprint().logical == before.logical
    finally:
        item.teardown()

    build = backintel(folder, "references", "build")
    assert build.returncode == 0, build.stderr
    ref = pytest_run(folder, "--run-id", "pg")
    assert ref.returncode == 0, ref.stdout + ref.stderr
    assert ": postgres SHOP_DSN on store postgres" in ref.stdout, ref.stdout
    assert outcomes(folder, "pg") == dict.fromkeys(ALL, "pass")
    records = (folder / "results" / "pg" / "records.jsonl").read_text().splitlines()
    assert {json.loads(r)["backend"] for r in records} == {"postgres"}
    perturbed = pytest_run(folder, "--analyst", "perturbed", "--run-id", "pg-perturbed")
    assert {outcomes(folder, "pg-perturbed")[s] for s in ANSWERABLE} == {"wrong_value"}
    assert perturbed.returncode == 1
    assert source_store.source_fingerprint() == before  # the source was never written
    source_store.teardown_session()


# -- files and folders -----------------------------------------------------------------------


def write_parquet(folder: Path) -> None:
    import datetime as dt
    from decimal import Decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir()
    rows = shop_rows()
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("customer_id", pa.int64(), nullable=False),
            pa.field("ordered_on", pa.date32(), nullable=False),
            pa.field("status", pa.string(), nullable=False),
            pa.field("amount_eur", pa.decimal128(10, 2), nullable=False),
        ]
    )
    columns = list(zip(*rows, strict=True))
    columns[2] = tuple(dt.date.fromisoformat(str(d)) for d in columns[2])
    columns[4] = tuple(Decimal(str(a)).quantize(Decimal("0.01")) for a in columns[4])
    table = pa.Table.from_arrays(
        [pa.array(c, f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )
    pq.write_table(table, folder / "orders.parquet")
    customers = pa.table(
        {"id": [1, 2, 3], "name": ["Ada", "Bo", "Cy"], "country": ["DE", "FR", "DE"]}
    )
    pq.write_table(customers, folder / "customers.parquet")


TYPES = {
    "sqlite": {"ordered_on": ("DATE", False), "amount_eur": ("NUMERIC(10, 2)", False)},
    "duckdb": {"ordered_on": ("DATE", False), "amount_eur": ("DECIMAL(10,2)", False)},
    "parquet": {"ordered_on": ("DATE", True), "amount_eur": ("DECIMAL(10,2)", True)},
    "csv": {"ordered_on": ("DATE", True), "amount_eur": ("DOUBLE", True)},
}
"""What the analyst's `describe_table("orders")` shows: the source's own types (and NOT NULL
where the format has constraints; a Parquet or CSV folder is read through views)."""


@pytest.mark.parametrize("kind", ["sqlite", "parquet", "duckdb", "csv"])
def test_the_tutorial_on_a_folder_or_file_of_your_own(tmp_path: Path, kind: str) -> None:
    exports = tmp_path / "exports"
    write_parquet(exports)
    binding = {"parquet": "{parquet: ../exports}"}.get(kind, "{sqlite: ../shop.sqlite}")
    if kind == "duckdb":
        import duckdb

        con = duckdb.connect(str(tmp_path / "shop.duckdb"))
        con.execute(
            "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer_id BIGINT NOT NULL, "
            "ordered_on DATE NOT NULL, status VARCHAR NOT NULL, amount_eur DECIMAL(10,2) NOT NULL)"
        )
        con.execute(f"INSERT INTO orders SELECT * FROM read_parquet('{exports}/orders.parquet')")
        con.execute(f"CREATE TABLE customers AS FROM read_parquet('{exports}/customers.parquet')")
        con.close()
        binding = "{duckdb: ../shop.duckdb}"
    if kind == "csv":
        import duckdb

        csv = tmp_path / "csv"
        csv.mkdir()
        for table in ("orders", "customers"):
            duckdb.sql(
                f"COPY (FROM read_parquet('{exports}/{table}.parquet')) TO '{csv}/{table}.csv'"
            )
        binding = "{csv: ../csv}"
    folder = project(tmp_path, binding)
    assert backintel(folder, "references", "build").returncode == 0
    assert backintel(folder, "validate", "scenarios").returncode == 0
    result = pytest_run(folder, "--run-id", kind)
    assert result.returncode == 0, result.stdout + result.stderr
    assert outcomes(folder, kind) == dict.fromkeys(ALL, "pass")
    scenario = load_scenario_file(folder / "scenarios" / "delivered-orders.scenario.yaml")
    source = user_source(scenario.dataset)
    assert source is not None
    from stores.base import DatasetFiles

    files: DatasetFiles = source.ensure_built(tmp_path)
    from pytest_backintel.collect.user_data import NATIVE

    store = source.make_store(NATIVE[kind], tmp_path / "w")
    store.setup_session()
    item = store.provision(files)
    try:
        with item.connect() as session:
            cols = {c.name: (c.type, c.nullable) for c in session.describe_table("orders").columns}
        assert {c: cols[c] for c in TYPES[kind]} == TYPES[kind]
    finally:
        item.teardown()
        store.teardown_session()


# -- locks -----------------------------------------------------------------------------------


SPY = """
from pathlib import Path

from pytest_backintel.contract import Refusal
from pytest_backintel.analyst_api import AnalystRun


class Spy:
    name, kind = "spy", "custom"

    def answer(self, task):
        with Path("asked.txt").open("a") as f:
            f.write(task.question + "\\n")
        return AnalystRun(Refusal(missing=["x"], explanation="spying"))


def spy(config):
    return Spy()
"""


def test_a_data_file_changed_after_locking_stops_the_run_before_the_first_request(
    tmp_path: Path,
) -> None:
    folder = project(tmp_path)
    (folder / "spy.py").write_text(SPY)
    assert backintel(folder, "references", "build").returncode == 0
    lock = json.loads((folder / "scenarios" / "backintel.lock.json").read_text())
    old_hash = lock["scenarios"]["delivered-orders"]["data_hash"]
    asked = pytest_run(folder, "-k", "delivered-orders", "--analyst", "spy:spy", "--run-id", "ok")
    assert asked.returncode == 1  # the spy refuses: it was asked
    assert (folder / "asked.txt").read_text() == "How many orders were delivered?\n"
    (folder / "asked.txt").unlink()
    con = sqlite3.connect(folder / "shop.sqlite")
    con.execute("UPDATE orders SET status = 'delivered' WHERE id = 3")
    con.commit()
    con.close()
    result = pytest_run(folder, "--analyst", "spy:spy", "--run-id", "stale")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert not (folder / "asked.txt").exists(), "the analyst was asked before the refusal"
    assert not (folder / "results" / "stale" / "records.jsonl").exists()
    assert "refusing to start: 3 scenario(s) cannot be scored on this run's data" in result.stderr
    for case in ANSWERABLE:  # each scenario, with both hashes, in one error
        line = next(ln for ln in result.stderr.splitlines() if f"scenario '{case}'" in ln)
        assert old_hash in line
        new_hash = re.search(r"this run's data is ([0-9a-f]{64})", line)
        assert new_hash is not None
        assert new_hash.group(1) != old_hash
    assert "Traceback" not in result.stderr
    workers = subprocess.run(  # with xdist the controller refuses before any item is sent
        [str(BIN / "pytest"), "scenarios", "-n", "2", "--analyst", "spy:spy", "--run-id", "x"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert workers.returncode == pytest.ExitCode.USAGE_ERROR, workers.stdout + workers.stderr
    assert "refusing to start: 3 scenario(s)" in workers.stdout + workers.stderr
    assert not (folder / "asked.txt").exists(), "a worker asked the analyst"
    assert "INTERNALERROR" not in workers.stdout + workers.stderr
    check = backintel(folder, "references", "build", "--check")
    assert check.returncode == 1
    assert "out of date" in check.stderr
    assert backintel(folder, "references", "build").returncode == 0
    again = pytest_run(folder, "-k", "delivered-orders", "--run-id", "rebuilt")
    assert again.returncode == 0, again.stdout


def test_two_references_that_disagree_abort_the_build_naming_the_file(tmp_path: Path) -> None:
    folder = project(tmp_path)
    path = folder / "scenarios" / "delivered-orders.scenario.yaml"
    path.write_text(path.read_text() + "  values: {delivered_orders: 5}\n")
    result = backintel(folder, "references", "build")
    assert result.returncode == 1
    assert re.search(
        r"scenarios/delivered-orders\.scenario\.yaml:\d+: reference: scenario 'delivered-orders'",
        result.stderr,
    ), result.stderr
    assert "reference.sql gives 4 but reference.values gives 5" in result.stderr
    assert not (folder / "scenarios" / "backintel.lock.json").exists()
    path.write_text(path.read_text().replace("delivered_orders: 5", "delivered_orders: 4"))
    assert backintel(folder, "references", "build").returncode == 0


def test_a_python_reference_from_your_own_code(tmp_path: Path) -> None:
    folder = project(tmp_path)
    (folder / "shop_refs.py").write_text(
        "def canceled_share(data):\n"
        "    rows = data.query('SELECT status FROM orders')\n"
        "    return {'canceled_share': sum(r['status'] == 'canceled' for r in rows) / len(rows)}\n"
    )
    path = folder / "scenarios" / "canceled-share.scenario.yaml"
    path.write_text(path.read_text() + "  python: shop_refs:canceled_share\n")
    assert backintel(folder, "references", "build").returncode == 0
    entry = json.loads((folder / "scenarios" / "backintel.lock.json").read_text())["scenarios"]
    assert entry["canceled-share"]["spec"]["reference"]["python"] == "shop_refs:canceled_share"
    (folder / "shop_refs.py").write_text(
        "def canceled_share(data):\n    return {'canceled_share': 0.25}\n"
    )
    wrong = backintel(folder, "references", "build")
    assert wrong.returncode == 1
    assert "reference.python gives 0.25" in wrong.stderr


# -- validate and --store --------------------------------------------------------------------


def test_validate_reports_duplicate_unknown_world_and_bad_sql_with_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = project(tmp_path)
    scenarios = folder / "scenarios"
    assert backintel(folder, "references", "build").returncode == 0
    text = (scenarios / "delivered-orders.scenario.yaml").read_text()
    (scenarios / "copy.scenario.yaml").write_text(text)
    (scenarios / "world.scenario.yaml").write_text(
        text.replace("id: delivered-orders", "id: on-a-world").replace(
            "dataset: {sqlite: ../shop.sqlite}", "dataset: {world: olsit}"
        )
    )
    (scenarios / "store.scenario.yaml").write_text(
        text.replace("id: delivered-orders", "id: on-a-store").replace(
            "dataset: {sqlite: ../shop.sqlite}", "dataset: {world: olist, store: sqllite}"
        )
    )
    revenue = scenarios / "delivered-revenue.scenario.yaml"
    revenue.write_text(revenue.read_text().replace("SELECT ROUND(", "SELECT ROUND(("))
    (scenarios / "typo.scenario.yaml").write_text(
        text.replace("id: delivered-orders", "id: typo").replace("family:", "famly:")
    )
    assert main(["validate", str(scenarios)]) == 1
    err = capsys.readouterr().err
    assert re.search(
        rf"{scenarios}/delivered-orders.scenario.yaml:1: id: 'delivered-orders' is already "
        rf"defined in {scenarios}/copy.scenario.yaml:1",
        err,
    ), err
    assert f"{scenarios}/world.scenario.yaml:5: dataset.world: unknown world 'olsit'" in err
    assert re.search(rf"{revenue}:13: reference.sql: does not parse as SQL", err), err
    assert f"{scenarios}/typo.scenario.yaml:8: famly: unknown field" in err
    assert (
        f"{scenarios}/store.scenario.yaml:5: dataset.store: unknown store backend 'sqllite'" in err
    )
    # a query that parses but does not run on the bound store, and a stale reference
    count = scenarios / "canceled-share.scenario.yaml"
    count.write_text(count.read_text().replace("FROM orders", "FROM order_lines"))
    assert main(["validate", str(count)]) == 1
    err = capsys.readouterr().err
    assert f"{count}:13: reference.sql: does not run on the bound sqlite source" in err
    assert "no such table: order_lines" in err
    assert f"{count}:12: reference: scenario 'canceled-share': its reference" in err


# -- suite files -----------------------------------------------------------------------------


def test_a_suite_file_binds_its_folder_and_below_and_a_scenario_of_its_own_wins(
    tmp_path: Path,
) -> None:
    """The tutorial's suite file binds `suites/` (paths relative to it); a scenario below that
    binds a file of its own keeps it; both run and pass on their own data."""
    folder = project(tmp_path)
    shutil.copy(folder / "shop.sqlite", folder / "suites" / "customers" / "other.sqlite")
    con = sqlite3.connect(folder / "suites" / "customers" / "other.sqlite")
    con.execute("INSERT INTO customers VALUES (4, 'Di', 'DE')")
    con.commit()
    con.close()
    inherits = folder / "suites" / "customers" / "german-customers.scenario.yaml"
    own = inherits.with_name("german-customers-other.scenario.yaml")
    own.write_text(
        inherits.read_text()
        .replace("id: german-customers", "id: german-customers-other")
        .replace("family: customers", "family: customers\ndataset: {sqlite: other.sqlite}")
    )
    scenario, other = load_scenario_file(inherits), load_scenario_file(own)
    assert scenario.dataset.source_path() == folder / "shop.sqlite"  # from suites/, not below
    assert other.dataset.source_path() == own.parent / "other.sqlite"
    assert (scenario.split.value, scenario.level, other.level) == ("development", 1, 1)
    assert backintel(folder, "references", "build").returncode == 0
    lock = json.loads((own.parent / "backintel.lock.json").read_text())["scenarios"]
    assert lock["german-customers"]["values"] == {"german_customers": 2}
    assert lock["german-customers-other"]["values"] == {"german_customers": 3}
    assert backintel(folder, "validate", "suites").returncode == 0
    result = subprocess.run(
        [str(BIN / "pytest"), "suites", "-p", "no:xdist", "--run-id", "suite"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert outcomes(folder, "suite") == dict.fromkeys(SUITE | {"german-customers-other"}, "pass")


@pytest.mark.parametrize(
    ("suite", "line", "message"),
    [
        ("dataset: {sqlite: ../shop.sqlite}\nsplit: development\nstore: duckdb\n", 3, "store: "
         "unknown field; a suite file gives dataset, split, level, family, name, policy, "
         "datasets"),
        ("level: 1\nsplit: development\ndataset: {sqlite: shop.sqlite}\n", 3, "dataset.sqlite: "
         "no sqlite file at "),
        ("split: development\nlevel: 9\ndataset: {sqlite: ../shop.sqlite}\n", 2, "level: Input "
         "should be less than or equal to 8"),
        ("dataset: [sqlite\n", 2, "invalid YAML"),
    ],
    ids=["unknown-field", "missing-source", "bad-level", "bad-yaml"],
)  # fmt: skip
def test_validate_and_collection_name_a_bad_suite_file_at_its_own_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suite: str, line: int, message: str
) -> None:
    folder = project(tmp_path)
    suite_file = folder / "suites" / "backintel-suite.yaml"
    suite_file.write_text(suite)
    extra = folder / "suites" / "customers" / "more.scenario.yaml"
    extra.write_text(
        (extra.parent / "german-customers.scenario.yaml").read_text().replace("id: ", "id: more-")
    )
    assert main(["validate", str(folder / "suites")]) == 1
    err = capsys.readouterr().err
    assert f"{suite_file}:{line}: {message}" in err, err
    assert err.count(f"{suite_file}:{line}: ") == 1, "once, not once per scenario below"
    collected = subprocess.run(
        [str(BIN / "pytest"), "suites", "-p", "no:xdist", "--collect-only"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )
    assert collected.returncode == pytest.ExitCode.INTERRUPTED
    assert f"{suite_file}:{line}: " in collected.stdout, collected.stdout


def test_a_misspelt_store_is_one_usage_error(tmp_path: Path) -> None:
    folder = project(tmp_path)
    result = pytest_run(folder, "--store", "sqllite")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.count("ERROR:") == 1
    assert "unknown store backend 'sqllite'. Did you mean 'sqlite'" in result.stderr


def test_a_store_that_cannot_serve_the_source_losslessly_is_one_usage_error(
    tmp_path: Path,
) -> None:
    folder = project(tmp_path)
    result = pytest_run(folder, "--store", "duckdb")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.count("ERROR:") == 1
    assert result.stderr.count("cannot run on --store duckdb without changing its types") == 5


def test_a_package_of_yours_that_shadows_an_installed_one_is_named(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\npythonpath = .\n")
    pytester.mkpydir("analyst")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*{pytester.path / 'analyst'} shadows the package 'analyst' that backintel-bench*"]
    )
    assert "rename your 'analyst'" in result.stderr.str()
    (pytester.path / "analyst" / "__init__.py").unlink()  # a plain folder shadows nothing
    assert pytester.runpytest_subprocess().ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_score_one_answer_for_a_scenario_file_of_your_own(tmp_path: Path) -> None:
    folder = project(tmp_path)
    assert backintel(folder, "references", "build").returncode == 0
    sql = "SELECT SUM(amount_eur) AS delivered_revenue FROM orders WHERE status = 'delivered'"

    def answer(value: float) -> str:
        path = folder / f"answer-{value}.json"
        path.write_text(
            json.dumps(
                {
                    "status": "answered",
                    "metrics": [{"name": "delivered_revenue", "value": value, "unit": "EUR"}],
                    "evidence": [
                        {"id": "e1", "kind": "sql", "code": sql, "metrics": ["delivered_revenue"]}
                    ],
                    "method": "summed the delivered orders",
                    "caveats": [],
                }
            )
        )
        return str(path)

    scenario = "scenarios/delivered-revenue.scenario.yaml"
    right = backintel(folder, "score", "--scenario", scenario, answer(126.0))
    assert right.returncode == 0, right.stdout + right.stderr
    assert json.loads(right.stdout)["outcome"] == "pass"
    by_id = backintel(folder, "score", "--case", "delivered-revenue", answer(126.0))
    assert by_id.returncode == 0, by_id.stdout + by_id.stderr  # found under the current folder
    wrong = backintel(folder, "score", "--scenario", scenario, answer(126.01))
    assert wrong.returncode == 1
    assert json.loads(wrong.stdout)["outcome"] in {"wrong_value", "unsupported_evidence"}


PY_REVENUE = """
import json, backintel_store as bs

rows = bs.connect().execute(
    "SELECT ROUND(SUM(amount_eur), 2) FROM orders{where}"
).fetchone()
print(json.dumps({{"delivered_revenue": rows[0]}}))
"""


def test_score_a_python_answer_in_the_sandbox_for_a_scenario_of_your_own(tmp_path: Path) -> None:
    """Python evidence is re-run in the real sandbox on the scenario's own bound SQLite file:
    the right program and value pass; a program summing every order (and its value) fails."""
    folder = project(tmp_path)
    assert backintel(folder, "references", "build").returncode == 0

    def answer(name: str, value: float, where: str) -> str:
        code = PY_REVENUE.format(where=where)
        evidence = {"id": "p1", "kind": "python", "code": code, "metrics": ["delivered_revenue"]}
        body = {
            "status": "answered",
            "metrics": [{"name": "delivered_revenue", "value": value, "unit": "EUR"}],
            "evidence": [evidence],
            "method": "summed in Python",
            "caveats": [],
        }
        (folder / name).write_text(json.dumps(body))
        return name

    scenario = "scenarios/delivered-revenue.scenario.yaml"
    delivered = " WHERE status = 'delivered'"
    right = backintel(folder, "score", "--scenario", scenario, answer("ok.json", 126.0, delivered))
    assert right.returncode == 0, right.stdout + right.stderr
    shown = json.loads(right.stdout)
    assert shown["outcome"] == "pass"
    assert shown["evidence"][0]["kind"] == "python"
    assert shown["evidence"][0]["values"] == {"delivered_revenue": 126.0}
    wrong = backintel(folder, "score", "--scenario", scenario, answer("all.json", 168.0, ""))
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert json.loads(wrong.stdout)["outcome"] == "wrong_value"
    unsupported = backintel(
        folder, "score", "--scenario", scenario, answer("claim.json", 126.0, "")
    )
    assert unsupported.returncode == 1
    assert json.loads(unsupported.stdout)["outcome"] == "unsupported_evidence"


def test_the_shipped_benchmark_runs_from_another_repository(tmp_path: Path) -> None:
    """`--pyargs scenarios` collects the installed suites, manifests included, and runs them
    with data and records under this folder."""
    env = {k: v for k, v in os.environ.items() if k != "BACKINTEL_DATA_DIR"}  # the default
    run = subprocess.run(
        [str(BIN / "pytest"), "--pyargs", "scenarios", "-m", "regression", "-p", "no:xdist"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"\b\d+ passed\b", run.stdout)
    records = next((tmp_path / "results").glob("*/records.jsonl")).read_text().splitlines()
    nodeids = {json.loads(r)["nodeid"] for r in records}
    assert any("original-regression.json" in n for n in nodeids), nodeids
    assert (tmp_path / "data" / "worlds").is_dir()


def test_validate_runs_check_queries_on_a_registered_world_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shipped = Path(__file__).resolve().parents[1] / "scenarios" / "definitions" / "level1"
    good = shipped / "l1-delivered-orders.scenario.yaml"
    bad = tmp_path / "bad.scenario.yaml"
    bad.write_text(
        good.read_text()
        .replace("id: l1-delivered-orders", "id: l1-bad")
        .replace("FROM orders", "FROM order_lines")
    )
    assert main(["validate", str(bad)]) == 0  # parses; the world is not built unless asked
    assert main(["validate", "--world-queries", str(good)]) == 0
    assert main(["validate", "--world-queries", str(bad)]) == 1
    err = capsys.readouterr().err
    assert re.search(
        rf"{bad}:\d+: check_sql: does not run on the bound world olist \(sqlite\): .*order_lines",
        err,
    ), err


@pytest.mark.parametrize(
    ("binding", "message"),
    [
        ("{sqlite: ../nope.sqlite}", "dataset.sqlite: no sqlite file at "),
        ("{parquet: ..}", "dataset.parquet: the folder "),
        ("{postgres: NO_SUCH_DSN_VAR}", "environment variable NO_SUCH_DSN_VAR"),
        ("{postgres: 'mysql://x/y'}", "is not a postgresql://user@host:port/dbname DSN"),
        ("{sqlite: ../shop.sqlite, store: duckdb}", "cannot run on --store duckdb"),
        ("{sqlite: ../shop.sqlite, csv: ..}", "dataset: Value error, bind one source, not 2"),
    ],
)
def test_a_bad_binding_is_a_file_line_error_at_collection(
    tmp_path: Path, binding: str, message: str
) -> None:
    folder = project(tmp_path, binding)
    result = pytest_run(folder, "-k", "delivered-orders")
    assert result.returncode == pytest.ExitCode.INTERRUPTED, result.stdout
    assert re.search(r"delivered-orders\.scenario\.yaml:5: ", result.stdout), result.stdout
    assert message in result.stdout


def test_a_damaged_lock_is_named_not_crashed_on(tmp_path: Path) -> None:
    folder = project(tmp_path)
    lock = folder / "scenarios" / "backintel.lock.json"
    lock.write_text("{not json")
    check = backintel(folder, "references", "build", "--check")
    assert check.returncode == 1
    assert f"{lock} is out of date for canceled-share, delivered-orders" in check.stderr
    damaged = pytest_run(folder, "-k", "delivered-orders", "--run-id", "damaged")
    assert damaged.returncode == pytest.ExitCode.USAGE_ERROR  # before any trial
    assert f"{lock}: not a readable lock file" in damaged.stderr
