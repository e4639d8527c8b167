"""One conformance suite over every registered store backend.

Each backend in `stores.registry.available_stores()` provisions the same small dataset (ints,
decimals, floats, unicode text, dates, timestamps, NULLs) and must give the same normalised
answers as plain DuckDB over the canonical Parquet, refuse every write/DDL/ATTACH/COPY/extension/
temp-table/setting statement without changing its fingerprint, keep items apart, and tear down
twice. `multi` runs as the specs in `MULTI_SPECS` (two attached components each, every alias
given the whole dataset; unqualified names resolve through the search path to the first).

Checks that concern only some backends are generated only for those (`only(...)`), never
skipped. A backend that cannot run skips with the reason, or fails when named in
`BACKINTEL_REQUIRE` (comma list; `multi` there requires every multi spec).
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from datetime import date, datetime, timedelta
from decimal import Decimal
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stores.base import (
    DatasetFiles,
    ProvisionedStore,
    QueryError,
    QueryRefused,
    QueryTimeout,
    Store,
    StoreError,
)
from stores.registry import UnknownStoreError, available_stores, load_store_class

MULTI_SPECS = ["multi:sqlite:left_db+postgres:right_db", "multi:iceberg:ice_db+duckdb:duck_db"]
BACKENDS = [b for b in available_stores() if b != "multi"] + MULTI_SPECS
REQUIRED = {b.strip() for b in os.environ.get("BACKINTEL_REQUIRE", "").split(",") if b.strip()}
DUCKDB_FAMILY = {"duckdb", "lake-parquet", "files", "files-mixed", "iceberg", "iceberg-s3", "multi"}


def family(spec: str) -> str:
    """The registered backend of a spec (`multi:...` -> `multi`)."""
    return spec.split(":", 1)[0]


def is_required(spec: str) -> bool:
    return spec in REQUIRED or family(spec) in REQUIRED


def only(applies: Callable[[str], bool]) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Run the decorated check on the backends `applies` accepts, and only on those."""

    def mark(test: Callable[..., None]) -> Callable[..., None]:
        test.backends = applies  # type: ignore[attr-defined]
        return test

    return mark


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store" in metafunc.fixturenames:
        applies = getattr(metafunc.function, "backends", lambda _spec: True)
        names = [b for b in BACKENDS if applies(b)]
        metafunc.parametrize("store", names, indirect=True, scope="module")


def shown(item: ProvisionedStore, tables: list[str]) -> list[str]:
    """The table names a session lists: `<alias>.<table>` per component for `multi`."""
    if item.backend != "multi":
        return tables
    return sorted(f"{alias}.{t}" for alias in item.components for t in tables)  # type: ignore[attr-defined]


NAMES = ["Zoë", "東京", "🙂 smile", "", None, "O'Brien", 'a,b "q"', "line\nbreak", "\\N", "NULL"]
STATUSES = ["delivered", "shipped", "canceled", "invoiced"]


def make_dataset(
    root: Path, name: str, n_orders: int, extra: bool = False, whole_seconds: bool = False
) -> DatasetFiles:
    """Parquet tables `customers` and `orders` (+ `extra`), and a SQLite file built from them;
    `whole_seconds` for a store whose timestamps hold no fraction of a second."""
    parquet = root / "parquet"
    parquet.mkdir(parents=True)
    customers = pa.table(
        {
            "id": pa.array(range(1, len(NAMES) + 1), pa.int64()),
            "name": pa.array(NAMES, pa.string()),
            "signup": pa.array(
                [date(2023, 11, 1) + timedelta(days=17 * i) if i % 4 else None for i in range(10)],
                pa.date32(),
            ),
            "score": pa.array([None if i == 3 else i * 1.25 - 2 for i in range(10)], pa.float64()),
        }
    )
    orders = pa.table(
        {
            "id": pa.array(range(1, n_orders + 1), pa.int64()),
            "customer_id": pa.array([None if i % 9 == 0 else i % 10 + 1 for i in range(n_orders)]),
            "amount": pa.array(
                [Decimal(i * 37 % 1000 - 100) / 100 for i in range(n_orders)], pa.decimal128(12, 2)
            ),
            "created": pa.array(
                [
                    datetime(2024, 1, 1, 8, 30)
                    + timedelta(hours=7 * i, microseconds=0 if whole_seconds else i)
                    for i in range(n_orders)
                ],
                pa.timestamp("us"),
            ),
            "status": pa.array([STATUSES[i % 4] for i in range(n_orders)]),
        }
    )
    tables = {"customers": customers, "orders": orders}
    if extra:
        tables["extra"] = pa.table({"k": pa.array([1], pa.int32())})
    for table_name, table in tables.items():
        pq.write_table(table, parquet / f"{table_name}.parquet")
    sqlite_path = root / "dataset.sqlite"
    with sqlite3.connect(sqlite_path) as conn:
        for table_name, table in tables.items():
            cols = ", ".join(f"{f.name} {_sqlite_type(f.type)}" for f in table.schema)
            conn.execute(f"CREATE TABLE {table_name} ({cols})")
            rows = [tuple(_sqlite_value(v) for v in r.values()) for r in table.to_pylist()]
            marks = ", ".join("?" * table.num_columns)
            conn.executemany(f"INSERT INTO {table_name} VALUES ({marks})", rows)
    return DatasetFiles(name=name, parquet_dir=parquet, sqlite_path=sqlite_path)


def _sqlite_type(t: pa.DataType) -> str:
    if pa.types.is_integer(t):
        return "INTEGER"
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "REAL"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP"
    return "DATE" if pa.types.is_date(t) else "TEXT"


def _sqlite_value(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, date):
        return value.isoformat()
    return value


_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_STAMP = re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d+)?$")


def normalise(value: Any) -> Any:
    """One comparable form per value: numbers as 6-place decimal text (1 == 1.0 == 1.00),
    dates and timestamps as ISO text (SQLite keeps them as text), NULL stays None."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float | Decimal):
        return str(Decimal(str(value)).quantize(Decimal("0.000001")))
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="microseconds")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str) and _STAMP.match(value):
        return datetime.fromisoformat(value).isoformat(sep=" ", timespec="microseconds")
    return value


def normalised(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [tuple(normalise(v) for v in row) for row in rows]


def test_normalise_folds_backend_forms_and_keeps_differences() -> None:
    assert normalise(1) == normalise(1.0) == normalise(Decimal("1.00"))
    assert normalise(datetime(2024, 1, 2, 3, 4)) == normalise("2024-01-02 03:04:00")
    assert normalise(date(2024, 1, 2)) == normalise("2024-01-02")
    assert normalise(None) is None
    assert normalise(0) != normalise(None)
    assert normalise(Decimal("1.01")) != normalise(1)
    assert normalise("2024-01-02") != normalise("2024-01-03")


QUERIES = [
    "SELECT count(*) AS n FROM orders",
    "SELECT status, count(*) AS n, sum(amount) AS total FROM orders "
    "GROUP BY status ORDER BY status",
    "SELECT id, name FROM customers ORDER BY id",
    "SELECT id, signup, score FROM customers WHERE signup >= '2024-01-01' ORDER BY id",
    "SELECT o.id, c.name, o.amount, o.created FROM orders o JOIN customers c "
    "ON c.id = o.customer_id WHERE o.id <= 12 ORDER BY o.id",
    "SELECT count(*) AS n FROM orders WHERE customer_id IS NULL",
    "SELECT min(created) AS lo, max(created) AS hi, min(amount) AS mn FROM orders",
    "SELECT avg(score) AS a, count(score) AS n, count(*) AS m FROM customers",
    "SELECT id FROM customers WHERE name = '' OR name IS NULL ORDER BY id",
]
REFUSED = [
    "INSERT INTO customers (id) VALUES (999)",
    "UPDATE orders SET status = 'x'",
    "DELETE FROM orders",
    "WITH x AS (SELECT 1 AS a) DELETE FROM orders",
    "DROP TABLE orders",
    "CREATE TABLE t2 (a INTEGER)",
    "CREATE TEMP TABLE t3 AS SELECT 1 AS a",
    "CREATE VIEW v2 AS SELECT 1 AS a",
    "ALTER TABLE orders ADD COLUMN z INTEGER",
    "ATTACH DATABASE '/tmp/backintel-evil.db' AS evil",
    "COPY orders TO '/tmp/backintel-evil.csv'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET search_path = 'x'",
    "SELECT 1 AS a; DELETE FROM orders",
]


@pytest.fixture(scope="session")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> DatasetFiles:
    return make_dataset(tmp_path_factory.mktemp("ds-main"), "conformance", 250)


@pytest.fixture(scope="session")
def other_dataset(tmp_path_factory: pytest.TempPathFactory) -> DatasetFiles:
    return make_dataset(tmp_path_factory.mktemp("ds-other"), "other", 7, extra=True)


def whole_seconds(name: str) -> bool:
    """Backends whose timestamps hold whole seconds (`clickhouse-server` on ClickHouse 18.16)."""
    return family(name) == "clickhouse-server"


@pytest.fixture(scope="session")
def seconds_datasets(tmp_path_factory: pytest.TempPathFactory) -> tuple[DatasetFiles, DatasetFiles]:
    """The two datasets with whole-second timestamps."""
    main = make_dataset(
        tmp_path_factory.mktemp("ds-main-s"), "conformance", 250, whole_seconds=True
    )
    other = make_dataset(tmp_path_factory.mktemp("ds-other-s"), "other", 7, True, True)
    return main, other


@pytest.fixture(scope="module")
def item_dataset(
    request: pytest.FixtureRequest, store: Store, dataset: DatasetFiles
) -> DatasetFiles:
    """`dataset` as `store` can hold it."""
    if whole_seconds(store.name):
        return request.getfixturevalue("seconds_datasets")[0]  # type: ignore[no-any-return]
    return dataset


@pytest.fixture(scope="module")
def item_other(
    request: pytest.FixtureRequest, store: Store, other_dataset: DatasetFiles
) -> DatasetFiles:
    """`other_dataset` as `store` can hold it."""
    if whole_seconds(store.name):
        return request.getfixturevalue("seconds_datasets")[1]  # type: ignore[no-any-return]
    return other_dataset


def start_store(name: str, workdir: Path, timeout_s: float = 1.5) -> Store:
    """The backend set up for a session, or a skip (a failure when it is required)."""
    try:
        store = load_store_class(name)(workdir, statement_timeout_s=timeout_s)
        store.setup_session()
    except (StoreError, UnknownStoreError, ImportError) as exc:
        message = f"store backend {name!r} cannot run here: {exc}"
        if is_required(name):
            pytest.fail(f"{message} (required by BACKINTEL_REQUIRE)")
        pytest.skip(message)
    return store


@pytest.fixture(scope="module")
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Store]:
    name: str = request.param
    if name == "clickhouse-server":
        request.getfixturevalue("clickhouse_server")
    store = start_store(name, tmp_path_factory.mktemp(f"store-{name}"))
    yield store
    store.teardown_session()


@pytest.fixture(scope="module")
def item(store: Store, item_dataset: DatasetFiles) -> Iterator[ProvisionedStore]:
    provisioned = store.provision(item_dataset)
    yield provisioned
    provisioned.teardown()


@pytest.fixture(scope="module")
def reference(item_dataset: DatasetFiles) -> duckdb.DuckDBPyConnection:
    """Plain DuckDB over the canonical Parquet: the answers every backend must give."""
    conn = duckdb.connect()
    for table in item_dataset.tables:
        conn.execute(
            f"CREATE VIEW {table} AS SELECT * FROM '{item_dataset.parquet_dir / table}.parquet'"
        )
    return conn


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


def test_tables_and_descriptions(item: ProvisionedStore, dataset: DatasetFiles) -> None:
    with item.connect() as session:
        assert session.list_tables() == shown(item, dataset.tables)
        for table in shown(item, dataset.tables):
            info = session.describe_table(table)
            stem = table.rsplit(".", 1)[-1]
            parquet = pq.read_metadata(dataset.parquet_dir / f"{stem}.parquet")
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


@pytest.mark.parametrize("sql", REFUSED)
def test_state_changes_are_refused(item: ProvisionedStore, sql: str) -> None:
    before = item.fingerprint()
    with item.connect() as session:
        with pytest.raises(QueryRefused):
            session.run_sql(sql)
        assert session.run_sql("SELECT count(*) AS n FROM orders").rows == [(250,)]
        assert session.list_tables() == shown(item, ["customers", "orders"])
    assert item.fingerprint() == before
    assert not Path("/tmp/backintel-evil.db").exists()
    assert not Path("/tmp/backintel-evil.csv").exists()


def test_fingerprint_is_stable_and_tells_datasets_apart(
    store: Store, item: ProvisionedStore, item_other: DatasetFiles
) -> None:
    first = item.fingerprint()
    with item.connect() as session:
        session.run_sql("SELECT * FROM orders")
    assert item.fingerprint() == first
    other = store.provision(item_other)
    try:
        assert other.fingerprint().logical != first.logical
    finally:
        other.teardown()


def test_timeout_interrupts_and_session_survives(item: ProvisionedStore) -> None:
    slow = (
        "SELECT count(*) AS n FROM orders a, orders b, orders c, orders d, orders e "
        "WHERE a.id + b.id + c.id + d.id + e.id > 7"
    )
    if item.backend == "clickhouse-server":  # 18.16: one join per SELECT, 244 MiB per query
        slow = (
            "SELECT count(*) AS n FROM (SELECT a.id + b.id AS s FROM orders a CROSS JOIN orders b)"
            " WHERE has(range(20000), toUInt32(s) + 100000)"
        )
    with item.connect() as session:
        with pytest.raises(QueryTimeout):
            session.run_sql(slow)
        assert session.run_sql("SELECT count(*) AS n FROM customers").rows == [(10,)]


def test_items_are_isolated_and_teardown_is_idempotent(
    store: Store, item_dataset: DatasetFiles, item_other: DatasetFiles
) -> None:
    one, two = store.provision(item_dataset), store.provision(item_other)
    assert one.store_id != two.store_id
    assert one.display_id == f"{store.name}:{one.store_id}"
    assert re.fullmatch(r"bi_[0-9a-f]{12}", one.store_id)
    with one.connect() as s1, two.connect() as s2:
        assert s1.list_tables() == shown(one, ["customers", "orders"])
        assert s2.list_tables() == shown(two, ["customers", "extra", "orders"])
        assert s1.run_sql("SELECT count(*) AS n FROM orders").rows == [(250,)]
        assert s2.run_sql("SELECT count(*) AS n FROM orders").rows == [(7,)]
        with pytest.raises(QueryError):
            s1.run_sql("SELECT * FROM extra")
    if one.mount_path is not None:
        assert one.mount_path != two.mount_path
    one.teardown()
    one.teardown()
    with two.connect() as s2:
        assert s2.run_sql("SELECT count(*) AS n FROM orders").rows == [(7,)]
    with pytest.raises((StoreError, QueryError)):
        one.connect().run_sql("SELECT 1 AS a")
    two.teardown()
    if two.mount_path is not None:
        assert not two.mount_path.exists()


def test_concurrent_provisioning_from_threads(
    request: pytest.FixtureRequest, store: Store, item_dataset: DatasetFiles, tmp_path: Path
) -> None:
    fresh = start_store(request.node.callspec.params["store"], tmp_path / "fresh")

    def work(_: int) -> tuple[str, int]:
        provisioned = fresh.provision(item_dataset)
        try:
            with provisioned.connect() as session:
                count = session.run_sql("SELECT count(*) AS n FROM orders").rows[0][0]
            return provisioned.store_id, int(count)  # type: ignore[arg-type]
        finally:
            provisioned.teardown()

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, range(6)))
    fresh.teardown_session()
    assert len({r[0] for r in results}) == 6
    assert {r[1] for r in results} == {250}


def _provision_in_process(name: str, workdir: str, parquet_dir: str) -> tuple[str, int] | str:
    try:
        store = load_store_class(name)(Path(workdir))
        store.setup_session()
    except (StoreError, UnknownStoreError, ImportError) as exc:
        return f"cannot run: {exc}"
    provisioned = store.provision(DatasetFiles("proc", Path(parquet_dir)))
    with provisioned.connect() as session:
        count = session.run_sql("SELECT count(*) AS n FROM orders").rows[0][0]
    provisioned.teardown()
    store.teardown_session()
    return provisioned.store_id, int(count)  # type: ignore[arg-type]


def test_concurrent_provisioning_from_processes(
    request: pytest.FixtureRequest, dataset: DatasetFiles, tmp_path: Path
) -> None:
    """Two processes per backend share one workdir, so they race on the template lock (multi
    specs are left out: their components are these same backends)."""
    single = [name for name in BACKENDS if family(name) != "multi"]
    request.getfixturevalue("clickhouse_server")
    seconds = request.getfixturevalue("seconds_datasets")[0]
    jobs = [
        (name, str(tmp_path / name), str((seconds if whole_seconds(name) else dataset).parquet_dir))
        for name in single
        for _ in "ab"
    ]
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        results = list(pool.map(_provision_in_process, *zip(*jobs, strict=True)))
    for (name, *_), result in zip(jobs, results, strict=True):
        if isinstance(result, str):
            assert not is_required(name), f"{name}: {result}"
            continue
        assert result[1] == 250, name
    ids = [r[0] for r in results if not isinstance(r, str)]
    assert len(ids) == len(set(ids))


ENGINE_REFUSES = [
    "INSERT INTO orders (id) VALUES (1)",
    "CREATE TABLE t2 (a INTEGER)",
    "DROP VIEW orders",
    "SET threads = 2",
    "SET enable_external_access = true",
    "RESET allowed_directories",
    "ATTACH '/tmp/backintel-evil.duckdb' AS evil",
    "COPY (SELECT 1) TO '/tmp/backintel-evil.csv'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SELECT * FROM read_csv('/etc/passwd')",
]


@only(lambda spec: family(spec) in DUCKDB_FAMILY)
@pytest.mark.parametrize("sql", ENGINE_REFUSES)
def test_duckdb_engine_guard_holds_without_the_statement_check(
    item: ProvisionedStore, sql: str
) -> None:
    """Read-only mode, locked configuration and no external access refuse these by themselves.

    (Temporary tables, SET VARIABLE and COPY into the item's own folder pass the engine, which
    is why `check_statement` refuses every non-SELECT statement first.)"""
    if item.backend == "iceberg-s3" and sql.endswith("httpfs"):
        sql = sql.replace("httpfs", "spatial")  # httpfs is this store's own, loaded already
    conn = item.engine_connection()  # type: ignore[attr-defined]
    try:
        assert conn.execute("SELECT count(*) FROM orders").fetchall() == [(250,)]
        with pytest.raises(duckdb.Error):
            conn.execute(sql).fetchall()
    finally:
        conn.close()
    assert not Path("/tmp/backintel-evil.duckdb").exists()
    assert not Path("/tmp/backintel-evil.csv").exists()


@only(lambda spec: spec == "postgres")
def test_postgres_privileges_are_the_guard(store: Store, item: ProvisionedStore) -> None:
    """As the item's role, outside our read-only transaction: writes and DDL still fail."""
    import psycopg

    dsn = store.dsn.rsplit("/", 1)[0].split("//", 1)[1].rsplit("@", 1)[-1]  # type: ignore[attr-defined]
    role = item.role  # type: ignore[attr-defined]
    with psycopg.connect(f"postgresql://{role}@{dsn}/{item.store_id}", autocommit=True) as conn:
        assert conn.execute("SHOW statement_timeout").fetchone() == ("1500ms",)
        conn.execute("SET default_transaction_read_only = off")
        for sql in [
            "INSERT INTO orders (id) VALUES (999)",
            "CREATE TABLE t2 (a integer)",
            "CREATE TEMP TABLE t3 (a integer)",
            "DROP TABLE orders",
        ]:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql)
        assert conn.execute("SELECT count(*) FROM orders").fetchone() == (250,)
    other = store.provision(make_dataset_once(store))
    try:
        with pytest.raises(psycopg.OperationalError, match="permission denied"):
            psycopg.connect(f"postgresql://{role}@{dsn}/{other.store_id}")
    finally:
        other.teardown()


def make_dataset_once(store: Store) -> DatasetFiles:
    root = store.workdir / "tiny"
    if not (root / "parquet").exists():
        return make_dataset(root, "tiny", 3)
    return DatasetFiles("tiny", root / "parquet", root / "dataset.sqlite")


@only(lambda spec: spec == "postgres")
def test_settings_changed_inside_a_select_do_not_last(item: ProvisionedStore) -> None:
    with item.connect() as session:
        session.run_sql("SELECT set_config('statement_timeout', '0', false) AS s")
        shown = session.run_sql("SELECT current_setting('statement_timeout') AS s")
    assert shown.rows == [("1500ms",)]


def tamper(item: ProvisionedStore) -> None:
    """Delete order 1 behind the store's back, as a superuser or file owner would."""
    if item.backend == "multi":
        tamper(next(iter(item.components.values())))  # type: ignore[attr-defined]
        return
    if item.backend == "iceberg":
        (target,) = (item.root / "warehouse" / "main" / "orders" / "data").glob("*.parquet")  # type: ignore[attr-defined]
        target.chmod(0o644)
        pq.write_table(pq.read_table(target).slice(1), target)
        return
    if item.backend == "iceberg-s3":
        s3 = item.endpoint.filesystem()  # type: ignore[attr-defined]
        (key,) = [k for k in item.objects() if "/orders/data/" in k]  # type: ignore[attr-defined]
        with s3.open_input_file(key) as f:
            table, size = pq.read_table(f), f.size()
        with s3.open_output_stream(key) as f:  # the manifest records the size: keep it
            f.write(same_size_parquet(table.slice(1), size))
        return
    if item.backend == "clickhouse":
        item.engine.run(f"DELETE FROM {item.qualified('orders')} WHERE id = 1")  # type: ignore[attr-defined]
        return
    if item.backend == "clickhouse-server":
        admin = item.store.admin  # type: ignore[attr-defined]
        admin.post(f"ALTER TABLE {item.qualified('orders')} DELETE WHERE id = 1")  # type: ignore[attr-defined]
        done = (
            "SELECT count() FROM system.mutations "
            f"WHERE database = '{item.store_id}' AND NOT is_done"
        )
        while admin.query(done).rows != [(0,)]:  # 18.16 has no mutations_sync
            time.sleep(0.05)
        return
    if item.backend == "postgres":
        import psycopg

        dsn = item._store.dsn.rsplit("/", 1)[0]  # type: ignore[attr-defined]
        with psycopg.connect(f"{dsn}/{item.store_id}", autocommit=True) as conn:
            conn.execute("DELETE FROM orders WHERE id = 1")
        return
    path = item.mount_path
    assert path is not None
    if path.is_file() and path.suffix == ".duckdb":
        path.chmod(0o644)
        with duckdb.connect(str(path)) as conn:
            conn.execute("DELETE FROM orders WHERE id = 1")
        return
    if path.is_file():
        path.chmod(0o644)
        with sqlite3.connect(path) as conn:
            conn.execute("DELETE FROM orders WHERE id = 1")
        return
    target = next(p for p in path.iterdir() if p.stem == "orders" or p.suffix == ".duckdb")
    target.chmod(0o644)
    if target.suffix == ".duckdb":
        with duckdb.connect(str(target)) as conn:
            conn.execute("DELETE FROM orders WHERE id = 1")
    elif target.suffix == ".parquet":
        table = pq.read_table(target)
        pq.write_table(table.slice(1), target)
    else:
        lines = target.read_text().splitlines(keepends=True)
        target.write_text("".join(lines[:-1]))


def same_size_parquet(table: pa.Table, size: int) -> bytes:
    """`table` as Parquet of exactly `size` bytes, padded in its key-value metadata."""
    pad = 0
    for _ in range(8):
        sink = pa.BufferOutputStream()
        with pq.ParquetWriter(sink, table.schema, compression="zstd", store_schema=False) as out:
            out.write_table(table)
            out.add_key_value_metadata({"pad": "x" * pad})
        data = sink.getvalue().to_pybytes()
        if len(data) == size:
            return data
        pad += size - len(data)
        assert pad >= 0, "the tampered table must be smaller than the original"
    raise AssertionError(f"could not pad a Parquet file to {size} bytes")


def test_fingerprint_sees_a_change_made_behind_the_store(
    store: Store, item_dataset: DatasetFiles
) -> None:
    victim = store.provision(item_dataset)
    try:
        before = victim.fingerprint()
        tamper(victim)
        after = victim.fingerprint()
    finally:
        victim.teardown()
    assert after.logical != before.logical
    assert after.physical != before.physical


@only(lambda spec: spec in ("files", "files-mixed"))
def test_files_mixed_has_both_formats(item: ProvisionedStore) -> None:
    assert item.mount_path is not None
    suffixes = sorted(p.suffix for p in item.mount_path.iterdir() if p.stem != "_schema")
    expected = [".csv", ".json"] if item.backend == "files-mixed" else [".csv", ".csv"]
    assert suffixes == expected


def test_postgres_session_sweep_drops_leftovers(dataset: DatasetFiles, tmp_path: Path) -> None:
    """Items never torn down are dropped by `teardown_session`; a dead process's by setup."""
    if os.environ.get("BACKINTEL_PG_DSN") == "initdb":
        pytest.skip("a throwaway cluster is private to its session: nothing is left to sweep")
    import psycopg

    pg = start_store("postgres", tmp_path)
    left = pg.provision(dataset)
    with psycopg.connect(pg.dsn, autocommit=True) as admin:  # type: ignore[attr-defined]
        admin.execute("DROP DATABASE IF EXISTS bi_00000000dead")
        admin.execute("CREATE DATABASE bi_00000000dead")
        comment = f"backintel:{pg._host}:999999999:feedbeef"  # type: ignore[attr-defined]
        admin.execute(f"COMMENT ON DATABASE bi_00000000dead IS '{comment}'")
        pg.teardown_session()
        start_store("postgres", tmp_path)
        names = {r[0] for r in admin.execute("SELECT datname FROM pg_database").fetchall()}
        roles = {r[0] for r in admin.execute("SELECT rolname FROM pg_roles").fetchall()}
    assert left.store_id not in names
    assert f"{left.store_id}_ro" not in roles
    assert "bi_00000000dead" not in names
