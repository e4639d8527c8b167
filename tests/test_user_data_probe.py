"""Evidence over data of your own must follow the data: on a SQLite, DuckDB, CSV, PostgreSQL
or MariaDB (the `sqlalchemy` store) source, a literal hidden in a query over a real table reads
a table (so the tables-read check lets it through) and is caught on the perturbed copy, through
`backintel score` and a real item; the reference query passes both ways; the source is never
written.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_own_data import backintel, project, pytest_run, shop_postgres, shop_rows, write_parquet

from pytest_backintel.collect.loading import load_scenario_file
from pytest_backintel.collect.user_data import NATIVE, user_source
from pytest_backintel.evidence.perturb_sources import perturb_source, source_form

__all__ = ["shop_postgres"]  # the fixture, used by name

MARIADB = os.environ.get("BACKINTEL_SQLALCHEMY_URL", "mysql+pymysql://root@127.0.0.1:3306/test")
"""The server the MariaDB source is made on (CI's and these machines' MariaDB)."""


@pytest.fixture
def shop_mariadb() -> Iterator[str]:
    """The shop as a MariaDB database made for this test (dropped after): its URL."""
    import sqlalchemy as sa

    name = f"shop_src_{secrets.token_hex(4)}"
    server = sa.create_engine(MARIADB)
    with server.begin() as con:
        con.exec_driver_sql(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
        con.exec_driver_sql(
            f"CREATE TABLE {name}.customers (id INT PRIMARY KEY, name TEXT NOT NULL, "
            "country TEXT NOT NULL)"
        )
        con.exec_driver_sql(
            f"CREATE TABLE {name}.orders (id INT PRIMARY KEY, customer_id INT NOT NULL, "
            "ordered_on DATE NOT NULL, status TEXT NOT NULL, amount_eur DECIMAL(10,2) NOT NULL)"
        )
        con.exec_driver_sql(
            f"INSERT INTO {name}.customers VALUES (1,'Ada','DE'),(2,'Bo','FR'),(3,'Cy','DE')"
        )
        con.exec_driver_sql(f"INSERT INTO {name}.orders VALUES (%s,%s,%s,%s,%s)", shop_rows())
    try:
        yield sa.make_url(MARIADB).set(database=name).render_as_string(hide_password=False)
    finally:
        with server.begin() as con:
            con.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
        server.dispose()


HONEST = {
    "delivered-orders": (
        "delivered_orders",
        "SELECT COUNT(*) AS delivered_orders FROM orders WHERE status = 'delivered'",
        4,
        "orders",
    ),
    "delivered-revenue": (
        "delivered_revenue",
        "SELECT ROUND(SUM(amount_eur), 2) AS delivered_revenue FROM orders "
        "WHERE status = 'delivered'",
        126.0,
        "EUR",
    ),
}
"""Each answerable tutorial case: metric, the honest query, its value, unit."""
HIDDEN = "SELECT {value} AS {name} FROM (SELECT * FROM orders LIMIT 1) AS t"
"""The right value as a literal, in a query that does read `orders`."""

LITERAL_AGENT = """
from pytest_backintel.analyst_api import AnalystRun
from pytest_backintel.contract import AnalystAnswer

ANSWERS = {answers!r}


class Literal:
    name = "literal"
    kind = "custom"

    def answer(self, task):
        for needle, (name, value, unit, sql) in ANSWERS.items():
            if needle in task.question:
                with task.connect() as store:
                    store.run_sql(sql)
                return AnalystRun(AnalystAnswer.model_validate({{
                    "status": "answered",
                    "metrics": [{{"name": name, "value": value, "unit": unit}}],
                    "evidence": [{{"id": "e1", "kind": "sql", "code": sql, "metrics": [name]}}],
                }}))
        raise RuntimeError("no answer for " + task.question)


def build(config):
    return Literal()
"""


def bind(tmp_path: Path, kind: str) -> str:
    """The scenario binding of the shop in `kind` form, written under `tmp_path`."""
    if kind == "sqlite":
        return "{sqlite: ../shop.sqlite}"
    if kind == "postgres":
        return "{postgres: SHOP_DSN}"
    if kind == "sqlalchemy":
        return "{sqlalchemy: SHOP_URL}"
    import duckdb

    exports = tmp_path / "exports"
    write_parquet(exports)
    if kind == "duckdb":
        con = duckdb.connect(str(tmp_path / "shop.duckdb"))
        con.execute("CREATE TABLE customers (id BIGINT PRIMARY KEY, name VARCHAR, country VARCHAR)")
        con.execute(
            "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer_id BIGINT NOT NULL "
            "REFERENCES customers (id), ordered_on DATE NOT NULL, status VARCHAR NOT NULL, "
            "amount_eur DECIMAL(10,2) NOT NULL)"
        )
        for table in ("customers", "orders"):
            con.execute(f"INSERT INTO {table} FROM read_parquet('{exports}/{table}.parquet')")
        con.close()
        return "{duckdb: ../shop.duckdb}"
    csv = tmp_path / "csv"
    csv.mkdir()
    for table in ("orders", "customers"):
        duckdb.sql(f"COPY (FROM read_parquet('{exports}/{table}.parquet')) TO '{csv}/{table}.csv'")
    return "{csv: ../csv}"


def answer_file(folder: Path, case: str, hidden: bool) -> str:
    name, sql, value, unit = HONEST[case]
    code = HIDDEN.format(value=value, name=name) if hidden else sql
    path = folder / f"{case}-{'hidden' if hidden else 'honest'}.json"
    evidence = [{"id": "e1", "kind": "sql", "code": code, "metrics": [name]}]
    metrics = [{"name": name, "value": value, "unit": unit}]
    path.write_text(json.dumps({"status": "answered", "metrics": metrics, "evidence": evidence}))
    return str(path)


@pytest.mark.parametrize("kind", ["sqlite", "duckdb", "csv", "postgres", "sqlalchemy"])
def test_a_literal_hidden_over_a_real_table_is_caught_on_every_source_kind(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if kind == "postgres":
        monkeypatch.setenv("SHOP_DSN", request.getfixturevalue("shop_postgres"))
    if kind == "sqlalchemy":
        monkeypatch.setenv("SHOP_URL", request.getfixturevalue("shop_mariadb"))
    folder = project(tmp_path, bind(tmp_path, kind))
    build = backintel(folder, "references", "build")
    assert build.returncode == 0, build.stdout + build.stderr
    for case in HONEST:
        scenario = f"scenarios/{case}.scenario.yaml"
        honest_file = answer_file(folder, case, False)
        honest = backintel(folder, "score", "--scenario", scenario, honest_file)
        assert honest.stdout, honest.stderr[-3000:]
        assert json.loads(honest.stdout)["outcome"] == "pass", honest.stdout + honest.stderr
        hidden = backintel(folder, "score", "--scenario", scenario, answer_file(folder, case, True))
        score = json.loads(hidden.stdout)
        assert score["outcome"] == "unsupported_evidence", hidden.stdout
        assert "does not follow the data: on a perturbed copy" in score["reasons"][0]
        assert hidden.returncode == 1

    answers = {}
    for case, (name, sql, value, unit) in HONEST.items():
        needle = "total amount" if case == "delivered-revenue" else "How many"
        code = HIDDEN.format(value=value, name=name) if case == "delivered-orders" else sql
        answers[needle] = (name, value, unit, code)
    (folder / "literal_agent.py").write_text(LITERAL_AGENT.format(answers=answers))
    run = pytest_run(folder, "-k", "delivered", "--analyst", "literal_agent:build", "--run-id", "x")
    lines = (folder / "results" / "x" / "records.jsonl").read_text().splitlines()
    outcomes = {r["scenario_id"]: r["outcome"] for r in map(json.loads, lines)}
    assert outcomes == {
        "delivered-orders": "unsupported_evidence",
        "delivered-revenue": "pass",
    }, run.stdout[-3000:]


def test_a_perturbed_copy_is_built_once_per_data_hash_and_keeps_the_schema(
    tmp_path: Path,
) -> None:
    """Two probes of one SQLite source share one copy; a changed source gets its own; the
    copy's tables keep their declared types and the source file is not written."""
    folder = project(tmp_path)
    scenario = load_scenario_file(folder / "scenarios" / "delivered-orders.scenario.yaml")
    source = user_source(scenario.dataset)
    assert source is not None
    files = source.ensure_built(tmp_path)
    assert source_form(files) == "sqlite"
    src = folder / "shop.sqlite"
    before = (src.read_bytes(), src.stat().st_mtime_ns)
    data_hash = source.data_hash(files)
    started = time.perf_counter()
    first = perturb_source(files, "sqlite", tmp_path / "cache", 1, data_hash)
    built_s = time.perf_counter() - started
    again = perturb_source(files, "sqlite", tmp_path / "cache", 1, data_hash)
    other = perturb_source(files, "sqlite", tmp_path / "cache", 1, "0" * 64)
    assert first.sqlite_path == again.sqlite_path != other.sqlite_path
    assert (src.read_bytes(), src.stat().st_mtime_ns) == before
    import sqlite3

    def ddl(path: Path | None) -> list[str]:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return sorted(r[0] for r in con.execute("SELECT sql FROM sqlite_master"))
        finally:
            con.close()

    assert ddl(first.sqlite_path) == ddl(src)
    store = source.make_store(NATIVE["sqlite"], tmp_path / "w")
    store.setup_session()
    try:
        item = store.provision(first)
        with item.connect() as session:
            amounts = session.run_sql("SELECT SUM(amount_eur) FROM orders").rows[0][0]
        item.teardown()
    finally:
        store.teardown_session()
    assert amounts != pytest.approx(168.0)  # the source's total moved
    print(f"perturbed SQLite copy built in {built_s:.3f}s")
