"""Checks of what an analyst reads: answers, tables, caps, types, and what is refused."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from stores.base import DatasetFiles, ProvisionedStore, QueryError, QueryRefused
from stores.conformance.cases import StoreCase
from stores.conformance.data import (
    FILE_READS,
    NAMES,
    QUERIES,
    REFUSED,
    normalise,
    normalised,
)

__all__ = [
    "test_file_reads_are_refused",
    "test_queries_agree_with_reference",
    "test_reference_is_sane",
    "test_row_cap_and_truncation",
    "test_state_changes_are_refused",
    "test_tables_and_descriptions",
    "test_type_round_trips",
]


def test_reference_is_sane(reference: duckdb.DuckDBPyConnection) -> None:
    assert reference.execute(QUERIES[0]).fetchall() == [(250,)]
    assert reference.execute(QUERIES[5]).fetchall() == [(28,)]
    assert reference.execute(QUERIES[8]).fetchall() == [(4,), (5,)]


@pytest.mark.parametrize("sql", QUERIES)
def test_queries_agree_with_reference(
    item: ProvisionedStore, reference: duckdb.DuckDBPyConnection, sql: str
) -> None:
    with item.connect() as session:
        got = session.run_sql(sql)
    expected = reference.execute(sql)
    assert [c.lower() for c in got.columns] == [d[0] for d in expected.description or []]
    assert normalised(got.rows) == normalised(expected.fetchall())
    assert not got.truncated


def test_tables_and_descriptions(
    case: StoreCase, item: ProvisionedStore, item_dataset: DatasetFiles
) -> None:
    with item.connect() as session:
        assert session.list_tables() == case.names(item, item_dataset.tables)
        for table in case.names(item, item_dataset.tables):
            info = session.describe_table(table)
            stem = table.rsplit(".", 1)[-1]
            parquet = pq.read_metadata(item_dataset.parquet_dir / f"{stem}.parquet")
            assert info.name == table
            assert info.row_count == parquet.num_rows
            assert [c.name for c in info.columns] == parquet.schema.to_arrow_schema().names
            assert all(c.type for c in info.columns)
        with pytest.raises(QueryError, match="orderz"):
            session.describe_table("orderz")


def test_row_cap_and_truncation(item: ProvisionedStore) -> None:
    with item.connect() as session:
        full = session.run_sql("SELECT * FROM orders ORDER BY id")
        exact = session.run_sql("SELECT * FROM orders ORDER BY id LIMIT 200")
        small = session.run_sql("SELECT id FROM orders ORDER BY id", max_rows=5)
    assert (len(full.rows), full.truncated) == (200, True)
    assert "truncated" in full.to_text()
    assert (len(exact.rows), exact.truncated) == (200, False)
    assert (small.rows, small.truncated) == ([(1,), (2,), (3,), (4,), (5,)], True)


def test_type_round_trips(item: ProvisionedStore, reference: duckdb.DuckDBPyConnection) -> None:
    """Every cell of both tables comes back as it went in: DECIMAL to the cent, dates and
    timestamps to the day and microsecond, NULL as NULL (never '' or 'NULL'), text exactly."""
    with item.connect() as session:
        for table in ("customers", "orders"):
            sql = f"SELECT * FROM {table} ORDER BY id"
            got = session.run_sql(sql, max_rows=1_000).rows
            want = reference.execute(sql).fetchall()
            assert normalised(got) == normalised(want), table
        names = session.run_sql("SELECT name FROM customers ORDER BY id").rows
        amounts = session.run_sql("SELECT amount FROM orders WHERE id IN (3, 4) ORDER BY id")
    assert [row[0] for row in names] == NAMES
    assert [normalise(r[0]) for r in amounts.rows] == [
        normalise(Decimal("-0.26")),
        normalise(Decimal("0.11")),
    ]


@pytest.mark.parametrize("sql", REFUSED)
def test_state_changes_are_refused(case: StoreCase, item: ProvisionedStore, sql: str) -> None:
    before = item.fingerprint()
    with item.connect() as session:
        with pytest.raises(QueryRefused):
            session.run_sql(sql)
        assert session.run_sql("SELECT count(*) AS n FROM orders").rows == [(250,)]
        assert session.list_tables() == case.names(item, ["customers", "orders"])
    assert item.fingerprint() == before
    assert not Path("/tmp/backintel-evil.db").exists()
    assert not Path("/tmp/backintel-evil.csv").exists()


@pytest.mark.parametrize("sql", FILE_READS)
def test_file_reads_are_refused(item: ProvisionedStore, sql: str) -> None:
    """A server-side file read fails, or returns nothing of the file."""
    with item.connect() as session:
        try:
            result = session.run_sql(sql)
        except QueryError:
            return
    cells = [str(v) for row in result.rows for v in row if v is not None]
    assert not any("root:" in cell for cell in cells), f"{sql} read /etc/passwd"
