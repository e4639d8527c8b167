"""The `clickhouse-server` backend against a hostile analyst, on a real ClickHouse server
(`clickhouse_server` fixture: Debian's 18.16 started in a temp folder, or the user's by DSN):
files, URLs, writes, setting changes, other items' databases and system tables are refused
through `run_sql` and as evidence with the fingerprint unchanged, and the analyst account's
own profile refuses them without the statement check. Skipped when no server can run, failed
instead when `BACKINTEL_REQUIRE` names `clickhouse-server`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_store_clickhouse import HOSTILE

from pytest_backintel.collect.loading import DEFINITIONS_DIR, load_scenario_file
from pytest_backintel.contract import AnalystAnswer
from pytest_backintel.evidence.reexecute import reexecute
from stores.base import DatasetFiles, QueryRefused, StoreError
from stores.clickhouse.http import ClickHouseHTTPError
from stores.clickhouse.server import ClickHouseServerStore, ProvisionedServer

REQUIRED = "clickhouse-server" in os.environ.get("BACKINTEL_REQUIRE", "")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> DatasetFiles:
    root = tmp_path_factory.mktemp("chs-data")
    orders = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "amount": pa.array([Decimal("1.25"), None, Decimal("-3.10")], pa.decimal128(12, 2)),
            "day": pa.array([date(2024, 1, 2), None, date(1990, 5, 5)], pa.date32()),
            "at": pa.array([datetime(2024, 1, 2, 3, 4, 5), None, None], pa.timestamp("us")),
        }
    )
    pq.write_table(orders, root / "orders.parquet")
    return DatasetFiles("chs", root)


@pytest.fixture(scope="module")
def store(
    clickhouse_server: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ClickHouseServerStore]:
    backend = ClickHouseServerStore(tmp_path_factory.mktemp("chs-store"))
    try:
        backend.setup_session()
    except StoreError as exc:
        if REQUIRED:
            pytest.fail(f"clickhouse-server cannot run here: {exc} (required by BACKINTEL_REQUIRE)")
        pytest.skip(f"clickhouse-server cannot run here: {exc}")
    yield backend
    backend.teardown_session()


@pytest.fixture(scope="module")
def item(store: ClickHouseServerStore, dataset: DatasetFiles) -> Iterator[ProvisionedServer]:
    provisioned = store.provision(dataset)
    yield provisioned
    provisioned.teardown()


def test_values_and_limits_come_from_the_server(
    store: ClickHouseServerStore, item: ProvisionedServer
) -> None:
    with item.connect() as session:
        got = session.run_sql("SELECT * FROM orders ORDER BY id")
        joined = session.run_sql(
            "SELECT a.id, b.amount FROM orders a LEFT JOIN orders b ON b.id = a.id + 10 "
            "ORDER BY a.id"
        )
        cut = session.run_sql("SELECT id FROM orders ORDER BY id", max_rows=2)
    assert got.rows == [
        (1, Decimal("1.25"), date(2024, 1, 2), datetime(2024, 1, 2, 3, 4, 5)),
        (2, None, None, None),
        (3, Decimal("-3.10"), date(1990, 5, 5), None),
    ]
    assert [r[1] for r in joined.rows] == [None, None, None]  # join_use_nulls: NULL, never 0
    assert (cut.rows, cut.truncated) == ([(1,), (2,)], True)
    assert store.statement_timeout_s > 0  # the profile's max_execution_time


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_statements_are_refused_and_change_nothing(
    item: ProvisionedServer, name: str
) -> None:
    before = item.fingerprint()
    with item.connect() as session:
        with pytest.raises(QueryRefused):
            session.run_sql(HOSTILE[name])
        assert session.run_sql("SELECT count() AS n FROM orders").rows == [(3,)]
    assert item.fingerprint() == before
    assert not Path("/tmp/backintel-evil-ch.csv").exists()


@pytest.mark.parametrize("name", ["file_table", "url", "insert", "set", "system_tables"])
def test_hostile_evidence_is_refused_and_changes_nothing(
    item: ProvisionedServer, name: str
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
        "SELECT * FROM file('/etc/passwd', 'TSV', 'x String')",
        "SELECT * FROM url('http://127.0.0.1:1/', 'TSV', 'x String')",
        "SELECT * FROM numbers(3)",
        "INSERT INTO orders (id) VALUES (99)",
        "CREATE TABLE t2 (a Int8) ENGINE = Memory",
        "DROP TABLE orders",
        "SET readonly = 0",
    ],
)
def test_the_analyst_profile_refuses_without_the_statement_check(
    store: ClickHouseServerStore, item: ProvisionedServer, sql: str
) -> None:
    """The server's `readonly=1` holds by itself: the guard is the analyst's privileges."""
    before = item.fingerprint()
    with pytest.raises(ClickHouseHTTPError, match="Code: 164"):
        store.analyst.post(sql, database=item.store_id)
    assert item.fingerprint() == before


def test_the_analyst_cannot_lift_its_limits_per_request(
    store: ClickHouseServerStore, item: ProvisionedServer
) -> None:
    for setting in ("readonly=0", "max_execution_time=0", "max_memory_usage=0"):
        with pytest.raises(ClickHouseHTTPError, match="Code: 164"):
            store.analyst.post(f"SELECT 1 SETTINGS {setting}", database=item.store_id)


def test_other_items_and_system_tables_are_out_of_reach(
    store: ClickHouseServerStore, item: ProvisionedServer, dataset: DatasetFiles
) -> None:
    """`readonly=1` still reads every database on 18.16 (system tables list other items'
    tables, columns and parts): the statement check refuses each by its qualifier."""
    other = store.provision(dataset)
    try:
        leaked = store.analyst.query("SELECT DISTINCT database FROM system.parts").rows
        assert (other.store_id,) in leaked  # what the check below has to stop
        with item.connect() as session:
            for sql in [
                f"SELECT count() AS n FROM {other.store_id}.orders",
                f"SELECT 1 AS a WHERE 1 IN {other.store_id}.orders",
                "SELECT database, table FROM system.parts",
                "SELECT name FROM system.columns WHERE database != currentDatabase()",
                "SELECT query FROM system.processes",
                "SELECT count() AS n FROM default.t",
            ]:
                with pytest.raises(QueryRefused, match="outside this store"):
                    session.run_sql(sql)
    finally:
        other.teardown()


def test_tables_read_names_the_tables_and_no_literal(item: ProvisionedServer) -> None:
    with item.connect() as session:
        assert session.tables_read("SELECT 3715 AS delivered_orders") == set()
        assert session.tables_read("SELECT 3715 FROM (SELECT 1 AS x) AS v") == set()
        assert session.tables_read("SELECT count() AS n FROM orders") == {"orders"}
        assert session.tables_read("SELECT 1 AS a WHERE 1 IN orders") == {"orders"}


def test_an_analyst_account_that_can_write_is_refused(
    clickhouse_server: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = os.environ.get("BACKINTEL_CLICKHOUSE_DSN")
    if not dsn:
        pytest.skip("no ClickHouse server")
    admin = ClickHouseServerStore(tmp_path)
    admin.setup_session()
    admin.teardown_session()
    user = admin.admin.user
    password = dsn.split("://", 1)[1].split("@", 1)[0].partition(":")[2]
    monkeypatch.setenv("BACKINTEL_CLICKHOUSE_ANALYST", f"{user}:{password}")
    with pytest.raises(StoreError, match=r"readonly='0'.*must set readonly=1"):
        ClickHouseServerStore(tmp_path / "b").setup_session()


def test_a_dsn_that_is_not_http_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BACKINTEL_CLICKHOUSE_DSN", "clickhouse://127.0.0.1:9000")
    with pytest.raises(StoreError, match=r"expected http://user:password@host:8123"):
        ClickHouseServerStore(tmp_path).setup_session()
    monkeypatch.delenv("BACKINTEL_CLICKHOUSE_DSN")
    with pytest.raises(StoreError, match="set BACKINTEL_CLICKHOUSE_DSN"):
        ClickHouseServerStore(tmp_path).setup_session()


@pytest.mark.parametrize("case_id", ["l1-delivered-orders", "l1-orders-by-status"])
def test_literal_evidence_is_unsupported_on_the_server(
    store: ClickHouseServerStore, case_id: str
) -> None:
    """The adversarial mutants (literal evidence, a literal over a real table, ...) on an Olist
    item provisioned on the server: each gets the outcome it must, the reference passes."""
    from adversarial import all_cases, mutants

    from pytest_backintel.run.hand_score import HandScorer
    from scenarios.worlds import data_dir

    case = all_cases()[case_id]
    hand = HandScorer(data_dir(), store="clickhouse-server")
    try:
        item, dialect = hand.store(case.scenario)
        got, reasons = {}, {}
        for mutant in mutants(hand, case, item, dialect):
            score, _ = hand.score(case.scenario, mutant.output, case.manifest)
            got[mutant.label] = (score.outcome.value, mutant.expected)
            reasons[mutant.label] = " ".join(r.message for r in score.reasons)
    finally:
        hand.close()
    assert got["literal evidence"] == ("unsupported_evidence", "unsupported_evidence")
    assert "reads no table" in reasons["literal evidence"]  # tables_read, not only the probe
    assert all(outcome == expected for outcome, expected in got.values()), got
