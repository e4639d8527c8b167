"""Reads hidden inside functions cannot pass a PostgreSQL source's data probe
(`stores.postgres.policy`): functions that run SQL text or read a named table, schema or database
(`query_to_xml`, `table_to_xml`, `ts_stat`, ...) are refused on every PostgreSQL session, and
on the probe every function, aggregate or operator defined outside `pg_catalog` (LANGUAGE sql
or plpgsql, which read tables without the reads showing in the plan) and the sampled values
of `pg_stats`; ordinary evidence still runs there, and a refusal is the evidence's recorded
outcome, not a crash. The source is a database of its own (`test_postgres_source.fill`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_own_data import ADMIN_DSN, _admin, backintel
from test_postgres_source import SCENARIOS, fill, project

from stores.base import DatasetFiles, QueryRefused
from stores.postgres.policy import refused_builtin

FUNCTIONS = [
    "CREATE FUNCTION n_usa() RETURNS bigint LANGUAGE sql AS $$SELECT count(*) "
    """FROM public."Invoice" WHERE "BillingCountry" = 'USA'$$""",
    "CREATE FUNCTION n_pl() RETURNS bigint LANGUAGE plpgsql AS $$BEGIN RETURN (SELECT count(*) "
    'FROM public."Invoice"); END$$',
    "CREATE FUNCTION n_frozen() RETURNS bigint IMMUTABLE LANGUAGE plpgsql AS $$BEGIN RETURN "
    '(SELECT count(*) FROM public."Invoice"); END$$',
    "CREATE FUNCTION plus_all(numeric, numeric) RETURNS numeric LANGUAGE sql AS $$SELECT $1 + "
    '(SELECT sum("Total") FROM public."Invoice")$$',
    "CREATE AGGREGATE total_all(numeric) (SFUNC = plus_all, STYPE = numeric)",
    "CREATE OPERATOR ### (FUNCTION = plus_all, LEFTARG = numeric, RIGHTARG = numeric)",
    'CREATE VIEW "UsaCount" AS SELECT n_usa() AS n',
]
HIDDEN = {
    "query_to_xml": "SELECT query_to_xml("
    """'select count(*) from public."Invoice"', true, false, '')""",
    "table_to_xml": """SELECT table_to_xml('public."Invoice"'::regclass, true, false, '')""",
    "ts_stat": "SELECT * FROM ts_stat("
    """'select to_tsvector("BillingCountry") from public."Invoice"')""",
    "ts_rewrite": """SELECT ts_rewrite('a'::tsquery, 'select ''a''::tsquery, ''b''::tsquery')""",
    "database_to_xml": "SELECT database_to_xml(true, false, '')",
    "schema_to_xml": "SELECT schema_to_xml('public', true, false, '')",
    "cursor_to_xml": "SELECT cursor_to_xml('c', 1, true, false, '')",
    "query_to_xml()": "SELECT pg_catalog.QUERY_TO_XML/* a comment */('select 1', true, false, '')",
    "function public.n_usa": "SELECT n_usa() AS m",
    "function public.n_pl": "SELECT public.n_pl() AS m",
    "function public.n_frozen": "SELECT n_frozen() AS m",  # folded while planning
    "aggregate public.total_all": 'SELECT total_all("Total") FROM "Invoice"',
    "operator ### calling public.plus_all": 'SELECT 1::numeric ### "Total" FROM "Invoice"',
    "pg_catalog.pg_statistic": "SELECT most_common_vals::text FROM pg_stats "
    "WHERE tablename = 'Invoice'",
    "public.UsaCount": 'SELECT n FROM "UsaCount"',  # the source's own view, calling n_usa
}
ORDINARY = [
    'SELECT COUNT(*), SUM("Total"), AVG("Total")::numeric(10,2), MAX("Total") FROM "Invoice"',
    'SELECT c."Country", COUNT(*) FROM "Invoice" i JOIN "Customer" c USING ("CustomerId") '
    "GROUP BY 1 ORDER BY 2 DESC, 1",
    'SELECT "InvoiceId", ROW_NUMBER() OVER (PARTITION BY "CustomerId" ORDER BY "Total" DESC), '
    'SUM("Total") OVER (ORDER BY "InvoiceId") FROM "Invoice" ORDER BY 1 LIMIT 5',
    'SELECT "Total"::int, CAST("InvoiceId" AS text), "Total"::float8 FROM "Invoice" LIMIT 3',
    'SELECT upper("FullName"), lower(left("Country", 2)), length("FullName"), '
    "concat_ws('-', \"Country\", 'x'), replace(\"FullName\", ' ', '_') FROM \"Customer\" LIMIT 3",
    'WITH t AS (SELECT "CustomerId", SUM("Total") AS s FROM "Invoice" GROUP BY 1) '
    "SELECT 'query_to_xml(' AS note, MAX(s) FROM t",  # a mention in a string is no call
    'SELECT COUNT(*) FROM "UsaInvoice"',
]


@pytest.fixture
def source() -> Iterator[tuple[str, dict[str, Any]]]:
    """(DSN, true values) of a fresh source database with functions of its own."""
    import psycopg

    name = f"pgfn_{secrets.token_hex(4)}"
    admin = _admin()
    admin.execute(f'CREATE DATABASE "{name}"')  # type: ignore[attr-defined]
    dsn = ADMIN_DSN.rsplit("/", 1)[0] + f"/{name}"
    try:
        truth = fill(dsn)
        with psycopg.connect(dsn, autocommit=True) as con:
            for ddl in FUNCTIONS:
                con.execute(ddl)
        yield dsn, truth
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[attr-defined]
        admin.close()  # type: ignore[attr-defined]


def test_the_tokens_tell_a_call_from_a_mention() -> None:
    assert refused_builtin("SELECT query_to_xml ('x', true, false, '')") == "query_to_xml"
    assert refused_builtin('SELECT "ts_stat"($$select 1$$)') == "ts_stat"
    assert refused_builtin("SELECT 'query_to_xml(' -- table_to_xml(\n") is None
    assert refused_builtin("SELECT $q$ schema_to_xml( $q$, E'cursor_to_xml(\\'' ") is None
    assert refused_builtin('SELECT "Query_To_Xml"(1)') is None  # another (quoted) name


def test_reads_hidden_in_functions_are_refused_on_the_probe_and_ordinary_evidence_runs(
    tmp_path: Path, source: tuple[str, dict[str, Any]]
) -> None:
    """Each hidden read is refused on the probe, naming the function (or relation) and why;
    the ordinary queries run there; the analyst's own session on the source refuses the
    SQL-text functions too but may call the source's functions (it reads the real data)."""
    from stores.postgres.perturb_views import pg_plan, pg_view_probe
    from stores.postgres.source import PostgresSourceStore

    dsn, truth = source
    files = DatasetFiles("src", parquet_dir=tmp_path / "none")
    store = PostgresSourceStore(tmp_path / "w", dsn)
    plans, notes = pg_plan(store, files)
    probe = pg_view_probe(store, files, tmp_path, 1, None, plans, notes)
    item = store.provision(files)
    try:
        with probe.connect() as session:
            for name, sql in HIDDEN.items():
                with pytest.raises(QueryRefused) as refused:
                    session.run_sql(sql)
                assert name in str(refused.value), (sql, str(refused.value))
                assert "refused" in str(refused.value) or "read past" in str(refused.value)
            for sql in ORDINARY:
                assert session.run_sql(sql).rows, sql
            assert session.run_sql(ORDINARY[-1]).rows[0][0] < truth["usa-invoices"]
        with item.connect() as analyst:
            with pytest.raises(QueryRefused, match=r"query_to_xml\(\) is refused .* SQL text"):
                analyst.run_sql(HIDDEN["query_to_xml"])
            assert analyst.run_sql("SELECT n_usa()").rows == [(truth["usa-invoices"],)]
    finally:
        item.teardown()
        probe.teardown()
        store.teardown_session()


def test_a_function_read_is_the_evidences_outcome_through_a_run(
    tmp_path: Path, source: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scored evidence that reads through a function of the source's own reproduces on the
    source but is `unsupported_evidence` with the probe's refusal recorded; evidence through
    `query_to_xml` is refused on the source itself, recorded too; the honest query passes."""
    dsn, truth = source
    monkeypatch.setenv("SRC_DSN", dsn)
    folder = project(tmp_path / "p", {"postgres": "SRC_DSN"})
    assert backintel(folder, "references", "build").returncode == 0

    def score(code: str) -> dict[str, Any]:
        answer = {
            "status": "answered",
            "metrics": [{"name": "m", "value": truth["usa-invoices"], "unit": "invoices"}],
            "evidence": [{"id": "e1", "kind": "sql", "code": code, "metrics": ["m"]}],
        }
        path = folder / f"a-{secrets.token_hex(3)}.json"
        path.write_text(json.dumps(answer))
        scenario = "scenarios/usa-invoices.scenario.yaml"
        done = backintel(folder, "score", "--scenario", scenario, str(path))
        assert done.stdout, done.stderr[-3000:]
        result: dict[str, Any] = json.loads(done.stdout)
        return result

    assert score(SCENARIOS["usa-invoices"][3])["outcome"] == "pass"
    got = score('SELECT n_usa() AS m FROM "Invoice" LIMIT 1')  # a table read, as required
    assert got["outcome"] == "unsupported_evidence", got
    error = got["evidence"][0]["probes"][0]["error"]
    assert "function public.n_usa is refused" in error, error
    got = score(
        """SELECT (xpath('//m/text()', query_to_xml('select count(*) AS m from "Invoice" """
        """where "BillingCountry" = ''USA''', true, false, '')))[1]::text::int AS m"""
    )
    assert got["outcome"] != "pass", got
    assert "query_to_xml() is refused" in json.dumps(got), got
