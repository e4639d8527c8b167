"""Every answer moves under the probe, on every binding of a source of your own (SQLite, DuckDB,
Parquet, CSV, PostgreSQL): a literal cheater is `unsupported_evidence` on a text top-1 whose
leader keeps its lead under row drops, a count over a table with no key, a count over a
three-row table and an integer sum over a one-row table (no row drop reaches it), while the
honest query passes and no trial is marked unguarded. An answer nothing can move is marked.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from test_own_data import backintel, postgres_source
from test_probe_keys import score_answer

PLANS = [(1, "Starter", 9.5), (2, "Pro", 29.0), (3, "Business", 99.0)]
SUBSCRIPTIONS = [(i, 3 if i % 5 < 3 else 1 + i % 2, 1 + i % 7) for i in range(1, 41)]
"""24 of 40 on Business: dropping a quarter of the rows at random never changes the leader."""
EVENTS = [(("login", "invoice", "upgrade")[i % 3], f"2024-01-{1 + i:02d}") for i in range(30)]
QUOTA = [(250,)]

DDL = [
    "CREATE TABLE plans (plan_id INTEGER PRIMARY KEY, name VARCHAR(40) NOT NULL, "
    "price DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE subscriptions (subscription_id INTEGER PRIMARY KEY, plan_id INTEGER NOT NULL "
    "REFERENCES plans (plan_id), seats INTEGER NOT NULL)",
    "CREATE TABLE events (kind VARCHAR(20) NOT NULL, day VARCHAR(10) NOT NULL)",
    "CREATE TABLE quota (seat_limit INTEGER NOT NULL)",
]
ROWS = {"plans": PLANS, "subscriptions": SUBSCRIPTIONS, "events": EVENTS, "quota": QUOTA}

SCENARIOS = {
    "top-plan": (
        "Which plan has the most subscriptions?",
        "top_plan",
        "text",
        "plan",
        "SELECT p.name AS top_plan FROM subscriptions s JOIN plans p ON p.plan_id = s.plan_id "
        "GROUP BY p.name ORDER BY COUNT(*) DESC LIMIT 1",
        "SELECT 'Business' AS top_plan FROM plans LIMIT 1",
    ),
    "event-count": (
        "How many events were logged?",
        "n",
        "count",
        "events",
        "SELECT COUNT(*) AS n FROM events",
        "SELECT 30 AS n FROM events LIMIT 1",
    ),
    "plan-count": (
        "How many plans are there?",
        "n",
        "count",
        "plans",
        "SELECT COUNT(*) AS n FROM plans",
        "SELECT 3 AS n FROM plans LIMIT 1",
    ),
    "seat-limit": (
        "What is the seat limit?",
        "seat_limit",
        "count",
        "seats",
        "SELECT SUM(seat_limit) AS seat_limit FROM quota",
        "SELECT 250 AS seat_limit FROM quota LIMIT 1",
    ),
}
"""id: question, metric, kind, unit, the honest query, the literal cheater's query."""
TRUTH = {"top-plan": "Business", "event-count": 30, "plan-count": 3, "seat-limit": 250}


def write_sqlite(path: Path) -> None:
    con = sqlite3.connect(path)
    for ddl in DDL:
        con.execute(ddl)
    for table, data in ROWS.items():
        con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(data[0]))})", data)
    con.commit()
    con.close()


def write_duckdb(path: Path) -> None:
    con = duckdb.connect(str(path))
    for ddl in DDL:
        con.execute(ddl)
    for table, data in ROWS.items():
        con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(data[0]))})", data)
    con.close()


def write_files(folder: Path, form: str) -> None:
    """The tables as Parquet files, or as CSV files with their types in `_schema.json`."""
    source = folder.parent / f"{folder.name}.duckdb"
    write_duckdb(source)
    folder.mkdir()
    con = duckdb.connect(str(source), read_only=True)
    schema = {}
    for table in ROWS:
        rel = con.sql(f"SELECT * FROM {table}")
        schema[table] = dict(zip(rel.columns, (str(t) for t in rel.types), strict=True))
        options = "(FORMAT parquet)" if form == "parquet" else "(HEADER)"
        con.execute(f"COPY {table} TO '{folder}/{table}.{form}' {options}")
    con.close()
    if form == "csv":
        (folder / "_schema.json").write_text(json.dumps(schema))


@pytest.fixture
def saas_postgres() -> Iterator[str]:
    """The same tables in a PostgreSQL database of their own (dropped after)."""
    with postgres_source("moves_src", DDL, ROWS) as dsn:
        yield dsn


def bind(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "sqlite":
        write_sqlite(tmp_path / "saas.sqlite")
        return "{sqlite: ../saas.sqlite}"
    if kind == "duckdb":
        write_duckdb(tmp_path / "saas.duckdb")
        return "{duckdb: ../saas.duckdb}"
    if kind in ("parquet", "csv"):
        write_files(tmp_path / "exports", kind)
        return f"{{{kind}: ../exports}}"
    request.getfixturevalue("monkeypatch").setenv(
        "SAAS_DSN", request.getfixturevalue("saas_postgres")
    )
    return "{postgres: SAAS_DSN}"


def project(folder: Path, binding: str, scenarios: dict[str, tuple[str, ...]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text('[tool.pytest.ini_options]\npythonpath = ["."]\n')
    (folder / "scenarios").mkdir()
    for sid, (question, metric, kind, unit, sql, *_) in scenarios.items():
        (folder / "scenarios" / f"{sid}.scenario.yaml").write_text(
            f"id: {sid}\nversion: 1\ntitle: {sid}\nquestion: {question}\n"
            f"dataset: {binding}\nsplit: development\nlevel: 1\nfamily: saas\n"
            f"answerable: true\nmetrics:\n  - {{name: {metric}, kind: {kind}, unit: {unit}}}\n"
            f'reference:\n  sql: "{sql}"\n'
        )
    return folder


def score(folder: Path, sid: str, metric: str, value: object, code: str) -> dict[str, object]:
    answer = {
        "status": "answered",
        "metrics": [{"name": metric, "value": value}],
        "evidence": [{"id": "e1", "kind": "sql", "code": code, "metrics": [metric]}],
    }
    return score_answer(folder, sid, answer)


@pytest.mark.parametrize("kind", ["sqlite", "duckdb", "parquet", "csv", "postgres"])
def test_a_literal_fails_every_answer_the_usual_probes_leave_in_place(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    folder = project(tmp_path, bind(kind, tmp_path, request), SCENARIOS)
    build = backintel(folder, "references", "build")
    assert build.returncode == 0, build.stdout + build.stderr
    assert "UNGUARDED" not in build.stdout + build.stderr
    for sid, (_, metric, _, _, honest_sql, cheat_sql) in SCENARIOS.items():
        honest = score(folder, sid, metric, TRUTH[sid], honest_sql)
        assert honest["outcome"] == "pass", (sid, honest)
        assert honest["probe_unguarded"] is None, (sid, honest)
        cheat = score(folder, sid, metric, TRUTH[sid], cheat_sql)
        assert cheat["outcome"] == "unsupported_evidence", (sid, cheat)


UNMOVED = {
    "ratio-one": (
        "What is the ratio?",
        "r",
        "count",
        "ratio",
        "SELECT COUNT(*) / COUNT(*) AS r FROM events",
    )
}
"""An answer no probe moves (`COUNT(*) / COUNT(*)` is 1 on every copy)."""


def test_an_answer_nothing_moves_is_marked_unguarded(tmp_path: Path) -> None:
    """`COUNT(*) / COUNT(*)` is 1 on every copy of the data: the honest answer passes, and the
    score says the probe could not move it rather than passing it silently, and `references
    build` says so once for the scenario."""
    write_sqlite(tmp_path / "saas.sqlite")
    folder = project(tmp_path, "{sqlite: ../saas.sqlite}", UNMOVED)
    build = backintel(folder, "references", "build")
    assert build.returncode == 0, build.stderr
    said = [line for line in build.stdout.splitlines() if "UNGUARDED" in line]
    assert len(said) == 1, build.stdout
    assert "ratio-one.scenario.yaml: UNGUARDED: the answer does not move" in said[0]
    got = score(folder, "ratio-one", "r", 1, UNMOVED["ratio-one"][4])
    assert got["outcome"] == "pass", got
    assert "does not move under the probe: r keeps" in str(got["probe_unguarded"]), got


def test_a_worlds_copy_moves_keyless_small_and_integer_tables_and_the_winner() -> None:
    """The copy a built world's probes read (`perturb_tables`): a table with no key drops rows
    by a hash of the whole row on the usual copy; a moving copy drops rows of a three-row table
    as well, grows integers but keeps 0 and 1, and drops the winning category with the rows
    that point at it, so a literal of any of them disagrees with the copy."""
    import polars as pl

    from pytest_backintel.evidence.perturb import perturb_tables

    tables = {
        "plans": pl.DataFrame({"plan_id": [p[0] for p in PLANS], "name": [p[1] for p in PLANS]}),
        "subscriptions": pl.DataFrame(
            {
                "subscription_id": [s[0] for s in SUBSCRIPTIONS],
                "plan_id": [s[1] for s in SUBSCRIPTIONS],
                "seats": [s[2] for s in SUBSCRIPTIONS],
                "active": [s[0] % 2 for s in SUBSCRIPTIONS],
            }
        ),
        "events": pl.DataFrame({"kind": [e[0] for e in EVENTS], "day": [e[1] for e in EVENTS]}),
    }
    notes: list[str] = []
    usual = [perturb_tables(tables, salt, notes=notes) for salt in (1, 2)]
    assert any(copy["events"].height < len(EVENTS) for copy in usual)
    assert all(copy["plans"].height == 3 for copy in usual)  # a small table, on the usual copy
    assert notes, "the three-row table is named"
    assert all("'plans'" in n for n in notes), notes

    moving = perturb_tables(tables, 7, moving=("Business",))
    assert "Business" not in moving["plans"]["name"].to_list()
    assert 3 not in moving["subscriptions"]["plan_id"].to_list()  # its dependants went with it
    kept = tables["subscriptions"].join(moving["subscriptions"], on="subscription_id")
    assert (
        kept.filter(pl.col("seats") >= 2)
        .select((pl.col("seats_right") > pl.col("seats")).all())
        .item()
    )
    assert kept.select((pl.col("active_right") == pl.col("active")).all()).item()  # flags stay
