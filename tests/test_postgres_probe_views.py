"""A PostgreSQL probe's views drop a row with the parent it points at, whether the parent is a
table that points at nothing (a hash of the foreign key, which PostgreSQL runs in parallel
workers) or one that points further (a semi-join on the parent's view)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import psycopg
import pytest
from test_own_data import ADMIN_DSN, _admin

from stores.postgres.probe import view_statements
from stores.probe import TablePlan

TYPES = {
    "customer": {"customerid": "integer"},
    "invoice": {"invoiceid": "integer", "customerid": "integer"},
    "line": {"lineid": "integer", "invoiceid": "integer"},
}
PLANS = {
    "customer": TablePlan(["customerid"], ["customerid"]),
    "invoice": TablePlan(
        ["invoiceid", "customerid"], ["invoiceid"], [(["customerid"], "customer", ["customerid"])]
    ),
    "line": TablePlan(
        ["lineid", "invoiceid"], ["lineid"], [(["invoiceid"], "invoice", ["invoiceid"])]
    ),
}


@pytest.fixture
def dsn() -> Iterator[str]:
    name = f"bi_probe_views_{secrets.token_hex(4)}"
    _admin().execute(f'CREATE DATABASE "{name}"')  # type: ignore[attr-defined]
    dsn = ADMIN_DSN.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(dsn, autocommit=True) as con:
        con.execute("CREATE TABLE customer (customerid integer PRIMARY KEY)")
        con.execute("CREATE TABLE invoice (invoiceid integer PRIMARY KEY, customerid integer)")
        con.execute("CREATE TABLE line (lineid integer PRIMARY KEY, invoiceid integer)")
        con.execute("INSERT INTO customer SELECT i FROM generate_series(1, 200) i")
        con.execute("INSERT INTO invoice SELECT i, 1 + i % 200 FROM generate_series(1, 2000) i")
        con.execute("INSERT INTO line SELECT i, 1 + i % 2000 FROM generate_series(1, 8000) i")
    yield dsn
    _admin().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[attr-defined]


def test_drops_follow_the_keys_through_both_forms(dsn: str) -> None:
    statements = view_statements(PLANS, TYPES, 7, "bi_t")
    invoice = next(s for s in statements if "VIEW invoice" in s.replace('"', ""))
    line = next(s for s in statements if "VIEW line" in s.replace('"', ""))
    assert "EXISTS" not in invoice, "a root parent is followed by its key's hash"
    assert "EXISTS" in line, "a parent that points further is followed by a semi-join"
    with psycopg.connect(dsn) as con:
        for statement in statements:
            con.execute(statement)
        counts = {
            t: con.execute(f"SELECT count(*) FROM pg_temp.{t}").fetchone()[0]  # type: ignore[index]
            for t in PLANS
        }
        assert 0 < counts["customer"] < 200
        assert 0 < counts["invoice"] < 2000
        assert 0 < counts["line"] < 8000
        dangling = con.execute(
            "SELECT (SELECT count(*) FROM pg_temp.invoice i WHERE NOT EXISTS (SELECT 1 FROM "
            "pg_temp.customer c WHERE c.customerid = i.customerid)), (SELECT count(*) FROM "
            "pg_temp.line l WHERE NOT EXISTS (SELECT 1 FROM pg_temp.invoice i WHERE "
            "i.invoiceid = l.invoiceid))"
        ).fetchone()
        assert dangling == (0, 0)
        gone = con.execute(
            "SELECT count(*) FROM public.invoice i WHERE NOT EXISTS (SELECT 1 FROM "
            "pg_temp.customer c WHERE c.customerid = i.customerid)"
        ).fetchone()
        assert gone is not None
        assert gone[0] > 0, "invoices of dropped customers existed"
