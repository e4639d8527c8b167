"""A user's SQLite file is used in place: each item reaches it under an opaque name of its own
without a byte copy, read-only; a write to the source between two fingerprints is seen by the
O(1) signature check; the content hash is streamed once per state and cached by signature."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stores.base import DatasetFiles, QueryError, QueryRefused
from stores.sqlite.source import SignedHashes, SQLiteSourceStore


def source(tmp_path: Path) -> Path:
    path = tmp_path / "shop.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE orders (OrderId INTEGER PRIMARY KEY, Amount DECIMAL(10,2))")
    con.executemany("INSERT INTO orders VALUES (?, ?)", [(i, i * 1.5) for i in range(1, 101)])
    con.commit()
    con.close()
    return path


def test_items_share_the_source_under_opaque_names_without_a_copy(tmp_path: Path) -> None:
    src = source(tmp_path)
    before = (src.read_bytes(), src.stat().st_mtime_ns, src.stat().st_mode)
    store = SQLiteSourceStore(tmp_path / "stores" / "sqlite")
    store.setup_session()
    files = DatasetFiles("shop", parquet_dir=src, sqlite_path=src)
    one, two = store.provision(files), store.provision(files)
    try:
        assert one.mount_path != two.mount_path
        assert "shop" not in one.mount_path.name
        assert one.mount_path.resolve() == src.resolve()  # the source itself, not a copy
        items = [p for p in store.workdir.iterdir() if p.suffix == ".sqlite"]
        assert len(items) == 2
        assert all(p.is_symlink() for p in items)
        with one.connect() as session:
            assert session.run_sql("SELECT COUNT(*) AS n FROM orders").rows == [(100,)]
            with pytest.raises(QueryRefused):
                session.run_sql("DELETE FROM orders")
        assert one.fingerprint() == two.fingerprint()
    finally:
        one.teardown()
        two.teardown()
        store.teardown_session()
    assert not one.mount_path.exists()
    assert not one.mount_path.is_symlink()
    assert (src.read_bytes(), src.stat().st_mtime_ns, src.stat().st_mode) == before


def test_a_write_to_the_source_during_a_trial_changes_the_fingerprint(tmp_path: Path) -> None:
    src = source(tmp_path)
    store = SQLiteSourceStore(tmp_path / "stores" / "sqlite")
    store.setup_session()
    item = store.provision(DatasetFiles("shop", parquet_dir=src, sqlite_path=src))
    try:
        first = item.fingerprint()
        assert item.fingerprint() == first
        con = sqlite3.connect(src)  # someone else writes the source
        con.execute("UPDATE orders SET Amount = Amount + 1 WHERE OrderId = 7")
        con.commit()
        con.close()
        after = item.fingerprint()
        assert after.physical != first.physical
        assert after.logical != first.logical
    finally:
        item.teardown()
        store.teardown_session()


def test_the_content_hash_is_cached_by_the_files_signature(tmp_path: Path) -> None:
    src = source(tmp_path)
    folder = tmp_path / "hashes"
    state, digest = SignedHashes(folder).get(src)
    assert len(list(folder.iterdir())) == 1
    cached = next(folder.iterdir())
    cached.write_text("f" * 64)  # a later process reads the cache instead of the file
    assert SignedHashes(folder).get(src)[1] == "f" * 64
    con = sqlite3.connect(src)
    con.execute("DELETE FROM orders WHERE OrderId = 1")
    con.commit()
    con.close()
    moved_state, moved = SignedHashes(folder).get(src)  # a new state: hashed again
    assert moved not in (digest, "f" * 64)
    assert moved_state.st_mtime_ns != state.st_mtime_ns or moved_state.st_size != state.st_size
    assert len(list(folder.iterdir())) == 2


def test_the_probe_of_a_source_is_views_that_a_schema_name_cannot_bypass(tmp_path: Path) -> None:
    """The probe's tables are TEMP views over the source: rows and amounts move, the source
    is not read past them (`main.orders` in any spelling is refused), and the file written
    for Python evidence holds exactly what the views show."""
    from stores.sqlite.perturb_views import sqlite_plan
    from stores.sqlite.probe import SQLiteProbeStore, materialise

    src = source(tmp_path)
    plans, notes = sqlite_plan(src)
    assert notes == []
    assert plans["orders"].key == ["OrderId"]
    assert plans["orders"].scale == ["Amount"]
    probe = SQLiteProbeStore(src, "bi_probe", 10.0, plans, salt=1)
    query = "SELECT COUNT(*) AS n, ROUND(SUM(Amount), 4) AS s FROM orders"
    try:
        with probe.connect() as session:
            ((count, total),) = session.run_sql(query).rows
            assert 50 < count < 100  # about one in four rows dropped
            for bypass in ("main.orders", '"MAIN"."orders"', "[Main].orders"):
                with pytest.raises(QueryRefused, match="past the probe's view"):
                    session.run_sql(f"SELECT COUNT(*) FROM {bypass}")
    finally:
        probe.teardown()
    whole = sqlite3.connect(src).execute("SELECT COUNT(*), SUM(Amount) FROM orders").fetchone()
    assert whole[0] == 100
    materialise(src, plans, 1, tmp_path / "probe.sqlite")
    con = sqlite3.connect(tmp_path / "probe.sqlite")
    assert con.execute(query).fetchone() == (count, total)
    con.close()


@settings(max_examples=25, deadline=None)
@given(
    customers=st.lists(st.integers(-(2**40), 2**40), min_size=0, max_size=30, unique=True),
    links=st.lists(st.tuples(st.integers(0, 40), st.floats(-1e9, 1e9)), max_size=60),
    salt=st.integers(1, 5),
)
def test_probe_views_keep_every_foreign_key_pointing_at_a_kept_row(
    tmp_path_factory: pytest.TempPathFactory,
    customers: list[int],
    links: list[tuple[int, float]],
    salt: int,
) -> None:
    """Whatever the keys and amounts, no invoice on the probe points at a dropped customer,
    a probe never adds a row, and a table of 4 rows or more has a key, so it can lose rows."""
    from stores.sqlite.perturb_views import sqlite_plan
    from stores.sqlite.probe import SQLiteProbeStore

    folder = tmp_path_factory.mktemp("probe")
    path = folder / "db.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE Customer (CustomerId INTEGER PRIMARY KEY, Name TEXT)")
    con.execute(
        "CREATE TABLE Invoice (InvoiceId INTEGER PRIMARY KEY, CustomerId INTEGER "
        "REFERENCES Customer (CustomerId), Total DECIMAL(10,2))"
    )
    con.executemany("INSERT INTO Customer VALUES (?, 'x')", [(c,) for c in customers])
    invoices = [
        (i, customers[k % len(customers)] if customers and k < 35 else None, total)
        for i, (k, total) in enumerate(links)
    ]
    con.executemany("INSERT INTO Invoice VALUES (?, ?, ?)", invoices)
    con.commit()
    con.close()
    plans, _ = sqlite_plan(path)
    probe = SQLiteProbeStore(path, "bi_probe", 10.0, plans, salt)
    try:
        with probe.connect() as session:
            orphans = session.run_sql(
                "SELECT COUNT(*) FROM Invoice WHERE CustomerId IS NOT NULL AND CustomerId NOT IN "
                "(SELECT CustomerId FROM Customer)"
            ).rows
            kept = session.run_sql("SELECT COUNT(*) FROM Invoice").rows[0][0]
            kept_customers = session.run_sql("SELECT COUNT(*) FROM Customer").rows[0][0]
    finally:
        probe.teardown()
    assert orphans == [(0,)]
    assert kept <= len(invoices)
    assert kept_customers <= len(customers)
    assert plans["Customer"].key == (["CustomerId"] if len(customers) >= 4 else [])


def test_a_withheld_grant_holds_on_a_source_used_in_place(tmp_path: Path) -> None:
    """A scope's denied table is refused on the source as on a copy (it used to be dropped)."""
    src = source(tmp_path)
    store = SQLiteSourceStore(tmp_path / "stores" / "sqlite")
    store.setup_session()
    files = DatasetFiles("shop", parquet_dir=src, sqlite_path=src)
    open_item = store.provision(files)
    scoped = store.provision(replace(files, denied=("orders",)))
    try:
        with open_item.connect() as session:
            assert session.describe_table("orders").row_count == 100
        with scoped.connect() as session, pytest.raises(QueryRefused, match="no read grant"):
            session.run_sql("SELECT COUNT(*) AS n FROM orders")
        with scoped.connect() as session, pytest.raises(QueryError):
            session.describe_table("orders")  # its row count is not handed over either
    finally:
        open_item.teardown()
        scoped.teardown()
        store.teardown_session()


def test_row_counts_are_shared_per_content_and_never_past_a_write(tmp_path: Path) -> None:
    src = source(tmp_path)
    store = SQLiteSourceStore(tmp_path / "stores" / "sqlite")
    store.setup_session()
    files = DatasetFiles("shop", parquet_dir=src, sqlite_path=src)
    first = store.provision(files)
    try:
        with first.connect() as session:
            assert session.describe_table("orders").row_count == 100
        con = sqlite3.connect(src)  # someone else writes the source
        con.execute("INSERT INTO orders VALUES (1000, 1.0)")
        con.commit()
        con.close()
        with first.connect() as session:  # this item's state is gone: counted again
            assert session.describe_table("orders").row_count == 101
        second = store.provision(files)
        with second.connect() as session:
            assert session.describe_table("orders").row_count == 101
        second.teardown()
    finally:
        first.teardown()
        store.teardown_session()
