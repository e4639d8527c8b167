"""The sqlite backend: provisioning, the read-only guard, limits, fingerprints, teardown."""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from stores.base import DatasetFiles, QueryError, QueryRefused, QueryTimeout, StoreError
from stores.fingerprint import (
    LogicalHasher,
    encode_cell,
    encode_row,
    file_sha256,
    logical_digest,
    tree_sha256,
)
from stores.owner import OWNER_FILE
from stores.registry import load_store_class
from stores.sqlite.store import SQLiteProvisionedStore, SQLiteStore, sqlite_logical_fingerprint

READ_ONLY = "run_sql is read-only: "
NOTE = "(writes, DDL, ATTACH, extension loading and state-changing PRAGMAs are refused)"

CUSTOMERS = [("c1", "Recife", "2017-01-03"), ("c2", None, "2017-02-11"), ("c3", "São Paulo", None)]
ORDERS = [
    (1, "c1", 120.5, "2017-03-01", "delivered"),
    (2, "c1", 0.0, "2017-03-02", None),
    (3, "c2", None, None, "canceled"),
    (4, "c3", 99.99, "2017-04-10", "delivered"),
]
ITEMS = [(i, 1 + i % 4, f"sku-{i:03d}", round(i * 1.25, 2)) for i in range(250)]


def _write_sqlite(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE customers (customer_id TEXT NOT NULL, city TEXT, signup DATE);
        CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, customer_id TEXT NOT NULL,
                             amount REAL, placed DATE, status TEXT);
        CREATE TABLE items (item_id INTEGER, order_id INTEGER, sku TEXT, price REAL);
        CREATE INDEX items_order ON items(order_id);
        CREATE VIEW v_big_orders AS SELECT * FROM orders WHERE amount > 100;
        """
    )
    conn.executemany("INSERT INTO customers VALUES (?, ?, ?)", CUSTOMERS)
    conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?)", ORDERS)
    conn.executemany("INSERT INTO items VALUES (?, ?, ?, ?)", ITEMS)
    conn.commit()
    conn.close()


def _write_parquet(folder: Path) -> None:
    folder.mkdir()
    customers = pa.table(
        {
            "customer_id": [c[0] for c in CUSTOMERS],
            "city": [c[1] for c in CUSTOMERS],
            "signup": [date.fromisoformat(c[2]) if c[2] else None for c in CUSTOMERS],
        }
    )
    orders = pa.table(
        {
            "id": pa.array([o[0] for o in ORDERS], pa.int64()),
            "customer_id": [o[1] for o in ORDERS],
            "amount": pa.array([o[2] for o in ORDERS], pa.float64()),
            "placed": [date.fromisoformat(o[3]) if o[3] else None for o in ORDERS],
            "status": [o[4] for o in ORDERS],
            "paid": pa.array(
                [Decimal("120.50"), None, None, Decimal("99.99")], pa.decimal128(9, 2)
            ),
            "express": [True, False, None, True],
            "shipped_at": [datetime(2017, 3, 3, 10, 30), None, None, datetime(2017, 4, 11, 8)],
        }
    )
    pq.write_table(customers, folder / "customers.parquet")
    pq.write_table(orders, folder / "orders.parquet")


@pytest.fixture
def dataset(tmp_path: Path) -> DatasetFiles:
    _write_parquet(tmp_path / "parquet")
    _write_sqlite(tmp_path / "shop.sqlite")
    return DatasetFiles("shop", tmp_path / "parquet", sqlite_path=tmp_path / "shop.sqlite")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    backend = SQLiteStore(tmp_path / "work", statement_timeout_s=0.3)
    backend.setup_session()
    yield backend
    backend.teardown_session()


@pytest.fixture
def provisioned(store: SQLiteStore, dataset: DatasetFiles) -> Iterator[SQLiteProvisionedStore]:
    item = store.provision(dataset)
    yield item
    item.teardown()


def test_registry_finds_the_backend() -> None:
    assert load_store_class("sqlite") is SQLiteStore


def test_provision_is_an_opaque_read_only_copy(
    provisioned: SQLiteProvisionedStore, store: SQLiteStore, dataset: DatasetFiles
) -> None:
    assert re.fullmatch(r"bi_[0-9a-f]{12}", provisioned.store_id)
    assert provisioned.display_id == f"sqlite:{provisioned.store_id}"
    path = provisioned.mount_path
    assert path == store.workdir / f"{provisioned.store_id}.sqlite"
    assert "shop" not in str(path.relative_to(store.workdir))
    assert path.stat().st_mode & 0o777 == 0o444
    assert dataset.sqlite_path is not None
    assert provisioned.fingerprint().physical == file_sha256(dataset.sqlite_path)


def test_list_and_describe(provisioned: SQLiteProvisionedStore) -> None:
    with provisioned.connect() as session:
        assert session.list_tables() == ["customers", "items", "orders", "v_big_orders"]
        info = session.describe_table("Orders")  # SQLite names are case-insensitive
        assert info.name == "orders"
        assert info.row_count == 4
        assert [(c.name, c.type, c.nullable) for c in info.columns] == [
            ("id", "INTEGER", True),
            ("customer_id", "TEXT", False),
            ("amount", "REAL", True),
            ("placed", "DATE", True),
            ("status", "TEXT", True),
        ]
        assert session.describe_table("v_big_orders").row_count == 1
        with pytest.raises(QueryError, match=r"unknown table 'order'\. Did you mean 'orders'"):
            session.describe_table("order")
        with pytest.raises(QueryError, match="Tables in this store: customers, items, orders"):
            session.describe_table("payments")


def test_run_sql_returns_typed_rows(provisioned: SQLiteProvisionedStore) -> None:
    with provisioned.connect() as session:
        result = session.run_sql("SELECT id, amount, placed, status FROM orders ORDER BY id")
        assert result.columns == ["id", "amount", "placed", "status"]
        assert result.rows[1] == (2, 0.0, "2017-03-02", None)
        assert result.rows[2] == (3, None, None, "canceled")
        assert not result.truncated
        assert "3\tNULL\tNULL\tcanceled" in result.to_text()
        assert result.to_text().endswith("[4 row(s)]")
        missing = "no such table: payment; tables in this store: customers, items"
        with pytest.raises(QueryError, match=missing):
            session.run_sql("SELECT * FROM payment")


def test_row_cap_and_truncation_flag(provisioned: SQLiteProvisionedStore) -> None:
    with provisioned.connect() as session:
        capped = session.run_sql("SELECT * FROM items")
        assert len(capped.rows) == 200
        assert capped.truncated
        assert "[truncated: only the first 200 rows are shown" in capped.to_text()
        exact = session.run_sql("SELECT * FROM items LIMIT 200")
        assert len(exact.rows) == 200
        assert not exact.truncated
        assert "truncated" not in exact.to_text()
        small = session.run_sql("SELECT * FROM items", max_rows=5)
        assert (len(small.rows), small.truncated, small.max_rows) == (5, True, 5)


REFUSED = [
    ("INSERT INTO orders VALUES (9, 'c1', 1, NULL, NULL)", "INSERT on table 'orders'"),
    ("INSERT INTO orders SELECT * FROM orders", "INSERT on table 'orders'"),
    ("REPLACE INTO customers VALUES ('c1', 'x', NULL)", "INSERT on table 'customers'"),
    ("UPDATE orders SET amount = 0", "UPDATE on table 'orders'"),
    ("DELETE FROM items", "DELETE on table 'items'"),
    ("WITH x AS (SELECT 1) DELETE FROM orders", "DELETE on table 'orders'"),
    ("EXPLAIN DELETE FROM orders", "DELETE on table 'orders'"),
    ("CREATE TABLE t (a)", "CREATE TABLE 't'"),
    ("CREATE TABLE t AS SELECT * FROM orders", "CREATE TABLE 't'"),
    ("CREATE TEMP TABLE t (a)", "CREATE TEMP TABLE 't'"),
    ("CREATE TEMP VIEW tv AS SELECT 1", "CREATE TEMP VIEW 'tv'"),
    ("CREATE VIEW v AS SELECT 1", "CREATE VIEW 'v'"),
    ("CREATE INDEX i ON orders (amount)", "CREATE INDEX 'i' on table 'orders'"),
    (
        "CREATE TEMP TRIGGER tr AFTER INSERT ON orders BEGIN SELECT 1; END",
        "CREATE TEMP TRIGGER 'tr' on table 'orders'",
    ),
    ("CREATE VIRTUAL TABLE temp.vt USING fts5(a)", "CREATE VIRTUAL TABLE 'vt'"),
    ("DROP TABLE orders", "DROP TABLE 'orders'"),
    ("DROP VIEW v_big_orders", "DROP VIEW 'v_big_orders'"),
    ("DROP INDEX items_order", "DROP INDEX 'items_order'"),
    ("ALTER TABLE orders ADD COLUMN z", "ALTER TABLE 'orders'"),
    ("ALTER TABLE orders RENAME TO o2", "ALTER TABLE 'orders'"),
    ("ATTACH DATABASE ':memory:' AS m", "ATTACH ':memory:'"),
    ("DETACH main", "DETACH 'main'"),
    ("PRAGMA user_version = 7", "PRAGMA user_version = 7 is not allowed"),
    ("PRAGMA query_only = OFF", "PRAGMA query_only = OFF is not allowed"),
    ("PRAGMA journal_mode = WAL", "PRAGMA journal_mode = WAL is not allowed"),
    ("PRAGMA writable_schema = ON", "PRAGMA writable_schema = ON is not allowed"),
    ("PRAGMA database_list", "PRAGMA database_list is not allowed"),
    ("SELECT * FROM pragma_database_list", "PRAGMA database_list is not allowed"),
    ("SELECT load_extension('/tmp/evil')", "the function load_extension() is not allowed"),
    ("BEGIN", "BEGIN (transaction control) is not allowed"),
    ("COMMIT", "COMMIT (transaction control) is not allowed"),
    ("SAVEPOINT s1", "SAVEPOINT/RELEASE 's1' is not allowed"),
    ("REINDEX", "REINDEX"),
    ("ANALYZE", "is not allowed"),
    ("VACUUM", "'VACUUM' statements are not allowed"),
    ("UPDATE sqlite_master SET sql = ''", "tried to write"),
]


@pytest.mark.parametrize(("sql", "reason"), REFUSED, ids=[s for s, _ in REFUSED])
def test_writes_ddl_attach_pragmas_are_refused(
    provisioned: SQLiteProvisionedStore, sql: str, reason: str
) -> None:
    before = provisioned.fingerprint()
    with provisioned.connect() as session:
        with pytest.raises(QueryRefused) as refused:
            session.run_sql(sql)
        assert str(refused.value).startswith(READ_ONLY)
        assert reason in str(refused.value)
        assert str(refused.value).endswith(NOTE)
        assert session.run_sql("SELECT count(*) FROM orders").rows == [(4,)]  # still usable
    assert provisioned.fingerprint() == before


def test_fingerprint_sees_a_write_that_got_through(provisioned: SQLiteProvisionedStore) -> None:
    """The check the refusal tests rely on: a real change moves both hashes."""
    before = provisioned.fingerprint()
    assert provisioned.fingerprint() == before
    provisioned.mount_path.chmod(0o644)
    writer = sqlite3.connect(provisioned.mount_path)
    writer.execute("UPDATE orders SET amount = 0 WHERE amount IS NULL")  # NULL -> 0
    writer.commit()
    writer.close()
    after = provisioned.fingerprint()
    assert after.logical != before.logical
    assert after.physical != before.physical


def test_multiple_statements_are_refused_before_anything_runs(
    provisioned: SQLiteProvisionedStore,
) -> None:
    before = provisioned.fingerprint()
    with provisioned.connect() as session:
        for sql in ["SELECT 1; DELETE FROM orders", "SELECT 1 /* ; */; SELECT 2", ";;SELECT 1;x"]:
            with pytest.raises(QueryRefused, match="run_sql accepts exactly one statement"):
                session.run_sql(sql)
        with pytest.raises(QueryError, match="needs one SQL statement"):
            session.run_sql("  -- nothing here\n ;")
    assert provisioned.fingerprint() == before


def test_vacuum_into_writes_no_file(provisioned: SQLiteProvisionedStore, tmp_path: Path) -> None:
    target = tmp_path / "stolen.db"
    with provisioned.connect() as session, pytest.raises(QueryRefused, match="VACUUM"):
        session.run_sql(f"VACUUM INTO '{target}'")
    assert not target.exists()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT ';' AS semi, count(*) FROM orders",
        "select 1; -- trailing comment",
        "WITH t AS (SELECT amount FROM orders) SELECT sum(amount) FROM t",
        "VALUES (1), (2)",
        "EXPLAIN QUERY PLAN SELECT * FROM items WHERE order_id = 1",
        "PRAGMA table_info(orders)",
        "PRAGMA index_list('items')",
        "PRAGMA user_version",
        "SELECT name FROM pragma_table_info('orders')",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 500) "
        "SELECT max(x) FROM c",
    ],
)
def test_read_only_queries_are_accepted(provisioned: SQLiteProvisionedStore, sql: str) -> None:
    with provisioned.connect() as session:
        assert session.run_sql(sql).rows


def test_statement_time_limit(provisioned: SQLiteProvisionedStore) -> None:
    endless = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    )
    with provisioned.connect() as session:
        started = time.monotonic()
        with pytest.raises(QueryTimeout, match=r"longer than the 0\.3 s limit"):
            session.run_sql(endless)
        assert time.monotonic() - started < 3
        assert session.run_sql("SELECT 42").rows == [(42,)]  # the limit resets per statement


def test_copies_are_isolated(store: SQLiteStore, dataset: DatasetFiles) -> None:
    first, second = store.provision(dataset), store.provision(dataset)
    assert first.store_id != second.store_id
    assert first.mount_path != second.mount_path
    assert first.fingerprint() == second.fingerprint()
    first.teardown()
    assert not first.mount_path.exists()
    with second.connect() as session:
        assert session.run_sql("SELECT count(*) FROM items").rows == [(250,)]
    second.teardown()


def test_concurrent_workers_sharing_a_workdir(tmp_path: Path, dataset: DatasetFiles) -> None:
    """Two backends (as two xdist workers would) provision from Parquet into one folder at once."""
    workers = [SQLiteStore(tmp_path / "shared") for _ in range(2)]
    parquet_only = DatasetFiles("shop", dataset.parquet_dir)

    def provision_some(backend: SQLiteStore) -> list[SQLiteProvisionedStore]:
        return [backend.provision(parquet_only) for _ in range(10)]

    with ThreadPoolExecutor(max_workers=2) as pool:
        items = [i for batch in pool.map(provision_some, workers) for i in batch]
    assert len({i.store_id for i in items}) == len(items) == 20
    assert len({i.fingerprint().logical for i in items}) == 1
    with items[0].connect() as session:  # a session may be used from another thread
        with ThreadPoolExecutor(max_workers=1) as pool:
            count = pool.submit(session.run_sql, "SELECT count(*) FROM orders").result()
        assert count.rows == [(4,)]
    for backend in workers:
        backend.teardown_session()
    assert list((tmp_path / "shared").iterdir()) == []


def test_teardown_is_idempotent_and_closes_sessions(
    store: SQLiteStore, dataset: DatasetFiles
) -> None:
    item = store.provision(dataset)
    session = item.connect()
    item.mount_path.with_name(item.mount_path.name + "-journal").write_bytes(b"")
    item.teardown()
    item.teardown()
    assert list(store.workdir.glob("bi_*")) == []
    with pytest.raises(StoreError, match="closed"):
        session.run_sql("SELECT 1")
    with pytest.raises(StoreError, match="torn down"):
        item.connect()


def test_teardown_after_an_interrupted_item(store: SQLiteStore, dataset: DatasetFiles) -> None:
    item = store.provision(dataset)
    item.mount_path.chmod(0o644)
    item.mount_path.unlink()  # something else already removed it
    item.teardown()
    leftover = store.provision(dataset)
    store.teardown_session()  # tears down what items left behind
    assert not leftover.mount_path.exists()


def test_provision_from_parquet(store: SQLiteStore, dataset: DatasetFiles) -> None:
    parquet_only = DatasetFiles("shop", dataset.parquet_dir)
    first = store.provision(parquet_only)
    with first.connect() as session:
        assert session.list_tables() == ["customers", "orders"]
        types = {c.name: c.type for c in session.describe_table("orders").columns}
        assert types == {
            "id": "INTEGER",
            "customer_id": "TEXT",
            "amount": "REAL",
            "placed": "DATE",
            "status": "TEXT",
            "paid": "REAL",
            "express": "BOOLEAN",
            "shipped_at": "TIMESTAMP",
        }
        rows = session.run_sql("SELECT * FROM orders ORDER BY id").rows
        assert rows[0] == (
            1,
            "c1",
            120.5,
            "2017-03-01",
            "delivered",
            120.5,
            1,
            "2017-03-03 10:30:00",
        )
        assert rows[2] == (3, "c2", None, None, "canceled", None, None, None)
    second = store.provision(parquet_only)  # reuses the built template
    assert first.fingerprint() == second.fingerprint()
    first.teardown()
    second.teardown()


def test_provision_needs_some_data(store: SQLiteStore, tmp_path: Path) -> None:
    (tmp_path / "odd").mkdir()
    pq.write_table(pa.table({"tags": [["a"], ["b", "c"]]}), tmp_path / "odd" / "t.parquet")
    with pytest.raises(StoreError, match="column 'tags' has Arrow type list<element: string>"):
        store.provision(DatasetFiles("odd", tmp_path / "odd"))
    half_built = [p for p in store.workdir.rglob("*") if p.is_file() and p.name != OWNER_FILE]
    assert not half_built
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match=r"no sqlite_path and no \*\.parquet files"):
        store.provision(DatasetFiles("none", tmp_path / "empty"))
    with pytest.raises(StoreError, match="does not exist"):
        store.provision(DatasetFiles("gone", tmp_path, sqlite_path=tmp_path / "gone.sqlite"))


def test_wal_source_is_copied_with_its_log(store: SQLiteStore, tmp_path: Path) -> None:
    source = tmp_path / "wal.sqlite"
    writer = sqlite3.connect(source)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("CREATE TABLE t (a)")
    writer.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(10)])
    writer.commit()  # rows live in the -wal file while `writer` stays open
    item = store.provision(DatasetFiles("wal", tmp_path, sqlite_path=source))
    writer.close()
    assert item.mount_path.read_bytes()[18] == 1  # rollback journal, not WAL
    with item.connect() as session:
        assert session.run_sql("SELECT count(*) FROM t").rows == [(10,)]
    item.teardown()


# --- logical fingerprint -------------------------------------------------------------------

CELLS = st.one_of(
    st.none(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
)
ROWS = st.lists(st.tuples(CELLS, CELLS, CELLS), min_size=1, max_size=12)


def _memory_fingerprint(rows: list[tuple[object, ...]]) -> str:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a, b, c)")  # no declared types: values keep their class
    conn.execute("CREATE TABLE u (k INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    conn.execute("INSERT INTO u VALUES (1)")
    try:
        return sqlite_logical_fingerprint(conn)
    finally:
        conn.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=ROWS, data=st.data())
def test_fingerprint_ignores_insertion_order(
    rows: list[tuple[object, ...]], data: st.DataObject
) -> None:
    shuffled = data.draw(st.permutations(rows))
    assert _memory_fingerprint(list(shuffled)) == _memory_fingerprint(rows)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=ROWS, data=st.data())
def test_fingerprint_sees_any_single_cell_change(
    rows: list[tuple[object, ...]], data: st.DataObject
) -> None:
    r = data.draw(st.integers(0, len(rows) - 1))
    c = data.draw(st.integers(0, 2))
    new = data.draw(CELLS)
    assume(encode_cell(new) != encode_cell(rows[r][c]))
    changed = list(rows)
    changed[r] = (*rows[r][:c], new, *rows[r][c + 1 :])
    assert _memory_fingerprint(changed) != _memory_fingerprint(rows)


@pytest.mark.parametrize("column", ["a", "b"])
def test_fingerprint_orders_values_sql_calls_equal(column: str) -> None:
    """1 = 1.0 in SQL and 'a' = 'A' under NOCASE: ties the canonical order must still break."""

    def fingerprint(values: list[object]) -> str:
        conn = sqlite3.connect(":memory:")
        conn.execute("CREATE TABLE t (a, b TEXT COLLATE NOCASE)")
        conn.executemany(f"INSERT INTO t ({column}) VALUES (?)", [(v,) for v in values])
        return sqlite_logical_fingerprint(conn)

    values: list[object] = [1, 1.0, 2] if column == "a" else ["a", "A", "b"]
    assert fingerprint(values) == fingerprint(values[::-1])
    assert fingerprint(values) != fingerprint([values[0], values[0], values[2]])


@pytest.mark.parametrize(
    ("old", "new"),
    [(None, 0), (0, ""), (None, ""), (1, 1.0), (1, "1"), (1.0, "1.0"), (b"1", "1"), (0.0, None)],
)
def test_fingerprint_tells_look_alike_values_apart(old: object, new: object) -> None:
    rows: list[tuple[object, ...]] = [("x", old, 2)]
    assert _memory_fingerprint(rows) != _memory_fingerprint([("x", new, 2)])
    assert _memory_fingerprint(rows) == _memory_fingerprint([("x", old, 2)])


def test_fingerprint_covers_names_and_types() -> None:
    base = logical_digest([("t", [("a", "INTEGER")], [(1,)])])
    assert base == logical_digest([("t", [("a", "INTEGER")], [(1,)])])
    assert base != logical_digest([("t2", [("a", "INTEGER")], [(1,)])])
    assert base != logical_digest([("t", [("b", "INTEGER")], [(1,)])])
    assert base != logical_digest([("t", [("a", "TEXT")], [(1,)])])
    assert base != logical_digest([("t", [("a", "INTEGER")], [(1,), (1,)])])  # multiplicity


def test_encoding_frames_cells_and_rows() -> None:
    assert encode_row(["ab", "c"]) != encode_row(["a", "bc"])
    assert encode_row([None, None]) != encode_row([None])
    assert len({encode_cell(v) for v in [1, 1.0, "1", True, b"1", Decimal(1), None]}) == 7
    assert encode_cell(-0.0) == encode_cell(0.0)  # SQL equality; documented
    with pytest.raises(StoreError, match="cannot fingerprint a value of type object"):
        encode_cell(object())


def test_hasher_demands_name_order() -> None:
    hasher = LogicalHasher()
    hasher.add_table("b", [], [])
    with pytest.raises(StoreError, match="increasing name order"):
        hasher.add_table("a", [], [])


def test_tree_hash_sees_content_and_names(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.parquet").write_bytes(b"one")
    first = tree_sha256(tmp_path / "d")
    (tmp_path / "d" / "x.parquet").write_bytes(b"two")
    second = tree_sha256(tmp_path / "d")
    (tmp_path / "d" / "x.parquet").rename(tmp_path / "d" / "y.parquet")
    assert len({first, second, tree_sha256(tmp_path / "d")}) == 3


def test_a_logical_fingerprint_is_computed_once_per_machine(
    tmp_path: Path, dataset: DatasetFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A later process of the backend (a new `SQLiteStore` on the same data folder) reads the
    logical fingerprint of the same bytes from disk; a damaged cache entry is computed again."""
    first = SQLiteStore(tmp_path / "work" / "1")
    item = first.provision(dataset)
    expected = item.fingerprint()
    item.teardown()
    (entry,) = (tmp_path / "work" / "logical").iterdir()
    assert entry.read_text() == expected.logical

    def scan(conn: sqlite3.Connection) -> str:
        raise AssertionError("the tables were scanned again")

    monkeypatch.setattr("stores.sqlite.store.sqlite_logical_fingerprint", scan)
    item = SQLiteStore(tmp_path / "work" / "2").provision(dataset)
    assert item.fingerprint() == expected
    item.teardown()

    entry.write_text("not a digest")
    monkeypatch.undo()
    item = SQLiteStore(tmp_path / "work" / "3").provision(dataset)
    assert item.fingerprint() == expected
    assert entry.read_text() == expected.logical
    item.teardown()


def test_a_write_that_puts_mode_and_mtime_back_still_moves_the_fingerprint(
    provisioned: SQLiteProvisionedStore,
) -> None:
    """An untouched copy is recognised by its stat (not hashed again); a write that restores
    the copy's mode and mtime afterwards still changes its ctime, so it is hashed."""
    before = provisioned.fingerprint()
    path = provisioned.mount_path
    state = path.stat()
    assert provisioned.fingerprint() == before
    path.chmod(0o644)
    writer = sqlite3.connect(path)
    writer.execute("UPDATE orders SET amount = 0 WHERE amount IS NULL")
    writer.commit()
    writer.close()
    path.chmod(0o444)
    os.utime(path, ns=(state.st_atime_ns, state.st_mtime_ns))
    after = provisioned.fingerprint()
    assert path.stat().st_mtime_ns == state.st_mtime_ns
    assert after.physical == file_sha256(path) != before.physical
    assert after.logical != before.logical
