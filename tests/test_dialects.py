"""Check queries written for SQLite give the same numbers on DuckDB, PostgreSQL and ClickHouse."""

import os
import sqlite3

import duckdb
import psycopg
import pytest

from pytest_backintel.evidence.dialects import translate

ROWS = "SELECT '2018-03-01 10:00:00' AS a, '2018-03-04 16:30:00' AS b, 2.345 AS x"
QUERIES = {
    "julianday": f"SELECT julianday(b) - julianday(a) AS v FROM ({ROWS})",
    "unixepoch": f"SELECT unixepoch(b) - unixepoch(a) AS v FROM ({ROWS})",
    "strftime_epoch": f"SELECT CAST(strftime('%s', b) AS INTEGER) AS v FROM ({ROWS})",
    "sum_of_predicates": f"SELECT SUM(b > a) + AVG(x > 3) AS v FROM ({ROWS})",
    "round": f"SELECT ROUND(x, 2) AS v FROM ({ROWS})",
    "month": f"SELECT CAST(strftime('%m', a) AS INTEGER) AS v FROM ({ROWS})",
    "round_half": "SELECT ROUND(1.005, 2) + ROUND(2.5) AS v",
    "year_of_text": f"SELECT CAST(strftime('%Y', a) AS INTEGER) * 100 AS v FROM ({ROWS})",
}
DSN = os.environ.get("BACKINTEL_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


def sqlite_value(sql: str) -> float:
    return float(sqlite3.connect(":memory:").execute(sql).fetchone()[0])


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_duckdb_agrees_with_sqlite(name: str) -> None:
    sql = QUERIES[name]
    got = duckdb.connect().execute(translate(sql, "duckdb")).fetchone()[0]
    assert float(got) == pytest.approx(sqlite_value(sql), abs=1e-6)


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_postgres_agrees_with_sqlite(name: str) -> None:
    sql = QUERIES[name]
    with psycopg.connect(DSN) as conn:
        got = conn.execute(translate(sql, "postgres")).fetchone()[0]  # type: ignore[index]
    assert float(got) == pytest.approx(sqlite_value(sql), abs=1e-6)


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_clickhouse_agrees_with_sqlite(name: str) -> None:
    from chdb.state import sqlitelike

    conn = sqlitelike.Connection(":memory:?session_timezone=UTC")
    try:
        got = str(conn.query(translate(QUERIES[name], "clickhouse"), "CSV")).strip()
    finally:
        conn.close()
    assert float(got) == pytest.approx(sqlite_value(QUERIES[name]), abs=1e-6)


def test_clickhouse_refuses_date_modifiers_it_cannot_translate() -> None:
    with pytest.raises(ValueError, match="no ClickHouse translation"):
        translate("SELECT date(a, '+1 day') AS v FROM t", "clickhouse")


def test_sqlite_is_returned_unchanged_and_unknown_dialects_refused() -> None:
    assert translate(QUERIES["round"], "sqlite") == QUERIES["round"]
    with pytest.raises(ValueError, match="no SQL translation to 'oracle'"):
        translate(QUERIES["round"], "oracle")


CORRELATED = {
    "rank_in_order_by": (
        "WITH per AS (SELECT k, COUNT(*) AS n FROM t GROUP BY k) "
        "SELECT p.k, p.n, 1 + (SELECT COUNT(*) FROM per AS q WHERE q.n > p.n) AS r "
        "FROM per AS p ORDER BY r, p.k"
    ),
    "aggregate_of_subqueries": (
        "SELECT COUNT(*) AS c, ROUND(SUM((SELECT SUM(u.v) FROM u WHERE u.k = t.k)), 2) AS s, "
        "SUM((SELECT COUNT(*) FROM u WHERE u.k = t.k)) AS m FROM t WHERE t.k <> 'z'"
    ),
}
T_ROWS = [("a",), ("a",), ("b",), ("c",), ("c",), ("c",), ("z",)]
U_ROWS = [("a", 1.25), ("a", 2.5), ("c", 0.125)]


@pytest.mark.parametrize("name", sorted(CORRELATED))
def test_clickhouse_runs_correlated_check_queries_as_sqlite_does(name: str) -> None:
    """ClickHouse runs correlated subqueries neither in ORDER BY nor inside aggregates, and
    gives NULL for a COUNT of no rows; the rewrites keep SQLite's answers."""
    from chdb.state import sqlitelike

    lite = sqlite3.connect(":memory:")
    lite.execute("CREATE TABLE t (k TEXT)")
    lite.execute("CREATE TABLE u (k TEXT, v REAL)")
    lite.executemany("INSERT INTO t VALUES (?)", T_ROWS)
    lite.executemany("INSERT INTO u VALUES (?, ?)", U_ROWS)
    expected = lite.execute(CORRELATED[name]).fetchall()
    conn = sqlitelike.Connection(":memory:?join_use_nulls=1&aggregate_functions_null_for_empty=1")
    try:
        conn.query("CREATE TABLE t (k String) ENGINE = Memory")
        conn.query("CREATE TABLE u (k String, v Float64) ENGINE = Memory")
        conn.query("INSERT INTO t VALUES " + ", ".join(f"('{k}')" for (k,) in T_ROWS))
        conn.query("INSERT INTO u VALUES " + ", ".join(f"('{k}', {v})" for k, v in U_ROWS))
        text = str(conn.query(translate(CORRELATED[name], "clickhouse"), "CSV")).strip()
    finally:
        conn.close()
    got = [tuple(cell.strip('"') for cell in line.split(",")) for line in text.splitlines()]
    assert got == [tuple(str(v) for v in row) for row in expected]
