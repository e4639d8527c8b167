"""The `clickhouse` backend (chDB) against a hostile analyst: files, URLs, other items' databases,
writes and setting changes are refused through `run_sql` and as evidence, fingerprint unchanged;
values come back normalised like every other backend."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pytest_backintel.collect.loading import DEFINITIONS_DIR, load_scenario_file
from pytest_backintel.contract import AnalystAnswer
from pytest_backintel.evidence.reexecute import reexecute
from stores.base import DatasetFiles, QueryError, QueryRefused, StoreError
from stores.clickhouse.policy import writes_in
from stores.clickhouse.store import ClickHouseStore, ProvisionedClickHouse, clickhouse_type

HOSTILE = {
    "file_table": "SELECT * FROM file('/etc/passwd')",
    "file_scalar": "SELECT file('/etc/passwd') AS x",
    "url": "SELECT * FROM url('http://127.0.0.1:1/')",
    "insert": "INSERT INTO orders VALUES (99, NULL, NULL, NULL)",
    "insert_select": "INSERT INTO orders SELECT * FROM orders",
    "outfile": "SELECT 1 AS a INTO OUTFILE '/tmp/backintel-evil-ch.csv'",
    "format": "SELECT 1 AS a FORMAT JSON",
    "settings": "SELECT 1 AS a SETTINGS readonly = 0",
    "system_tables": "SELECT name FROM system.tables",
    "system_in": "SELECT 1 AS a WHERE 'x' IN system.databases",
    "s3": "SELECT * FROM s3('http://127.0.0.1:1/b/k.csv')",
    "remote": "SELECT * FROM remote('127.0.0.1:9000', system.one)",
    "mysql": "SELECT * FROM mysql('127.0.0.1:3306', 'db', 't', 'u', 'p')",
    "postgresql": "SELECT * FROM postgresql('127.0.0.1:5432', 'db', 't', 'u', 'p')",
    "executable": "SELECT * FROM executable('cat /etc/passwd', 'CSV', 'x String')",
    "input": "SELECT * FROM input('x String')",
    "merge": "SELECT * FROM merge(REGEXP('.*'), '.*')",
    "python": "SELECT * FROM Python(HOSTILE)",
    "dictionary": "SELECT dictGet('d', 'v', 1) AS x",
    "join_get": "SELECT joinGet('t', 'v', 1) AS x",
    "two_statements": "SELECT 1 AS a; DROP TABLE orders",
    "drop": "DROP TABLE orders",
    "create": "CREATE TABLE t2 (a Int8) ENGINE = Memory",
    "alter_delete": "ALTER TABLE orders DELETE WHERE 1",
    "delete": "DELETE FROM orders WHERE 1",
    "set": "SET readonly = 0",
    "system": "SYSTEM DROP MARK CACHE",
    "show": "SHOW DATABASES",
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> DatasetFiles:
    root = tmp_path_factory.mktemp("ch-data")
    orders = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "amount": pa.array([Decimal("1.25"), None, Decimal("-3.10")], pa.decimal128(12, 2)),
            "day": pa.array([date(2024, 1, 2), None, date(1960, 5, 5)], pa.date32()),
            "at": pa.array([datetime(2024, 1, 2, 3, 4, 5, 6), None, None], pa.timestamp("us")),
        }
    )
    pq.write_table(orders, root / "orders.parquet")
    return DatasetFiles("ch", root)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClickHouseStore]:
    backend = ClickHouseStore(tmp_path_factory.mktemp("ch-store"), statement_timeout_s=2)
    backend.setup_session()
    yield backend
    backend.teardown_session()


@pytest.fixture(scope="module")
def item(store: ClickHouseStore, dataset: DatasetFiles) -> Iterator[ProvisionedClickHouse]:
    provisioned = store.provision(dataset)
    yield provisioned
    provisioned.teardown()


def test_values_are_normalised_like_the_other_backends(item: ProvisionedClickHouse) -> None:
    with item.connect() as session:
        got = session.run_sql("SELECT * FROM orders ORDER BY id")
        stamp = session.run_sql("SELECT toDateTime('2020-02-02 10:00:00') AS t, 1 AS n")
        empty = session.run_sql("SELECT id FROM orders WHERE id > 99")
        joined = session.run_sql(
            "SELECT a.id, b.amount FROM orders a LEFT JOIN orders b ON b.id = a.id + 10 "
            "ORDER BY a.id"
        )
        nothing = session.run_sql("SELECT sum(amount) AS s FROM orders WHERE id > 99")
    assert got.columns == ["id", "amount", "day", "at"]
    assert got.rows == [
        (1, Decimal("1.25"), date(2024, 1, 2), datetime(2024, 1, 2, 3, 4, 5, 6)),
        (2, None, None, None),
        (3, Decimal("-3.10"), date(1960, 5, 5), None),
    ]
    assert stamp.rows == [(datetime(2020, 2, 2, 10, 0), 1)]
    assert (empty.columns, empty.rows) == (["id"], [])
    assert [r[1] for r in joined.rows] == [None, None, None]  # NULL, never 0
    assert nothing.rows == [(None,)]


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_statements_are_refused_and_change_nothing(
    item: ProvisionedClickHouse, name: str
) -> None:
    before = item.fingerprint()
    with item.connect() as session:
        with pytest.raises(QueryRefused):
            session.run_sql(HOSTILE[name])
        assert session.run_sql("SELECT count() AS n FROM orders").rows == [(3,)]
    assert item.fingerprint() == before
    assert not Path("/tmp/backintel-evil-ch.csv").exists()


@pytest.mark.parametrize("name", ["file_table", "url", "insert", "file_scalar", "outfile"])
def test_hostile_evidence_is_refused_and_changes_nothing(
    item: ProvisionedClickHouse, name: str
) -> None:
    scenario = load_scenario_file(DEFINITIONS_DIR / "level1" / "l1-orders-by-status.scenario.yaml")
    metric = scenario.metrics[0].name
    answer = AnalystAnswer.model_validate(
        {
            "metrics": [{"name": metric, "value": 1, "unit": "orders"}],
            "evidence": [{"id": "e1", "kind": "sql", "code": HOSTILE[name], "metrics": [metric]}],
            "method": "hostile",
        }
    )
    before = item.fingerprint()
    (result,) = reexecute(answer, scenario, item)
    assert not result.ran
    assert result.error is not None
    assert "refused" in result.error
    assert item.fingerprint() == before


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM file('/etc/passwd')",
        "SELECT * FROM url('http://127.0.0.1:1/')",
        "INSERT INTO orders VALUES (99, NULL, NULL, NULL)",
        "CREATE TABLE t2 (a Int8) ENGINE = Memory",
        "SELECT 1 AS a SETTINGS readonly = 0",
        "SELECT * FROM Python(HOSTILE)",
    ],
)
def test_engine_profile_refuses_without_the_statement_check(
    item: ProvisionedClickHouse, sql: str
) -> None:
    """`readonly=1` and the disabled Python table function hold by themselves (`file()` as a
    scalar and INTO OUTFILE do not, which is why `run_sql` checks the parse tree first)."""
    with item.connect() as session, pytest.raises(QueryRefused):
        session.engine_query(sql)  # type: ignore[attr-defined]


def test_another_items_database_is_out_of_reach(
    store: ClickHouseStore, item: ProvisionedClickHouse, dataset: DatasetFiles
) -> None:
    other = store.provision(dataset)
    try:
        with item.connect() as session:
            with pytest.raises(QueryRefused, match="outside this store"):
                session.run_sql(f"SELECT count() AS n FROM {other.store_id}.orders")
            with pytest.raises(QueryRefused, match="outside this store"):
                session.run_sql(f"SELECT 1 AS a WHERE 1 IN {other.store_id}.orders")
    finally:
        other.teardown()


def test_generators_and_ordinary_queries_pass(item: ProvisionedClickHouse) -> None:
    with item.connect() as session:
        assert session.run_sql("SELECT count() AS n FROM numbers(10)").rows == [(10,)]
        ok = session.run_sql("WITH x AS (SELECT id FROM orders) SELECT max(id) AS m FROM x")
        assert ok.rows == [(3,)]
        with pytest.raises(QueryError, match="orderz"):
            session.run_sql("SELECT * FROM orderz")


def test_a_misspelt_query_is_an_error_not_a_refusal(item: ProvisionedClickHouse) -> None:
    with item.connect() as session, pytest.raises(QueryError) as caught:
        session.run_sql("SELECT id FRM orders")
    assert not isinstance(caught.value, QueryRefused)
    assert writes_in("SELECT 'DELETE' AS `insert` FROM t -- drop") == []
    assert writes_in("WITH x AS (SELECT 1) DELETE FROM t") == ["delete"]


def test_fingerprint_sees_a_write_behind_the_store(
    store: ClickHouseStore, dataset: DatasetFiles
) -> None:
    victim = store.provision(dataset)
    try:
        before = victim.fingerprint()
        victim.engine.run(f"INSERT INTO {victim.qualified('orders')} VALUES (4, 1, NULL, NULL)")
        after = victim.fingerprint()
    finally:
        victim.teardown()
    assert after.logical != before.logical
    assert after.physical != before.physical


def test_torn_down_item_cannot_be_reached(store: ClickHouseStore, dataset: DatasetFiles) -> None:
    gone = store.provision(dataset)
    gone.teardown()
    gone.teardown()
    with pytest.raises(StoreError, match="torn down"):
        gone.connect()


def test_types_and_unknown_types() -> None:
    assert clickhouse_type(pa.decimal128(12, 2)) == "Nullable(Decimal(12, 2))"
    assert clickhouse_type(pa.timestamp("us"), nullable=False) == "DateTime64(6)"
    with pytest.raises(StoreError, match="no column type"):
        clickhouse_type(pa.list_(pa.int8()))


def test_leftover_engine_folders_of_dead_processes_are_removed(tmp_path: Path) -> None:
    stale = tmp_path / "chdb-999999999"
    stale.mkdir(parents=True)
    backend = ClickHouseStore(tmp_path)
    backend.setup_session()
    try:
        assert not stale.exists()
    finally:
        backend.teardown_session()
