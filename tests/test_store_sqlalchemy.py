"""The SQLAlchemy store on MariaDB through the conformance suite, as a package written from
outside runs it, plus what only this store has: privileges as the guard and the sweep of a
killed run's users.

The server is `BACKINTEL_SQLALCHEMY_URL` (CI: `mysql+pymysql://root@127.0.0.1:3306/test`); unset,
the store skips, or fails when `sqlalchemy` is in `BACKINTEL_REQUIRE`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from stores.base import DatasetFiles, ProvisionedStore, QueryRefused, Store
from stores.conformance import StoreCase, only
from stores.conformance.suite import *  # noqa: F403
from stores.sqlalchemy import SQLAlchemyItem
from stores.sqlalchemy.store import URL_ENV

URL = os.environ.get(URL_ENV, "mysql+pymysql://root@127.0.0.1:3306/test?charset=utf8mb4")


def _admin(store: Store | None) -> sa.Engine:
    """The store's admin engine, or (None) a plain one to the server, which sweeps nothing."""
    if store is None:
        return sa.create_engine(URL, poolclass=sa.pool.NullPool)
    return store.engine  # type: ignore[attr-defined,no-any-return]


def tamper(item: ProvisionedStore) -> None:
    """Delete order 1 as the server's admin, behind the store."""
    assert isinstance(item, SQLAlchemyItem)
    with item.store.engine.begin() as conn:
        conn.execute(sa.text(f"DELETE FROM `{item.database}`.orders WHERE id = 1"))


def leftover(store: Store | None, store_id: str, mount: Path | None, workdir: Path) -> bool:
    """The item's database or user is still on the server."""
    with _admin(store).connect() as conn:
        dbs = conn.execute(sa.text("SHOW DATABASES LIKE :n"), {"n": store_id}).all()
        users = conn.execute(
            sa.text("SELECT user FROM mysql.user WHERE user = :n"), {"n": store_id}
        ).all()
    return bool(dbs or users)


CONFORMANCE_STORES = [
    StoreCase(f"sqlalchemy:{URL}", id="sqlalchemy-mariadb", tamper=tamper, leftover=leftover)
]


KILLED = """
import sys, time
from pathlib import Path
from stores.base import DatasetFiles
from stores.registry import load_store_class
store = load_store_class(sys.argv[1])(Path(sys.argv[2]))
store.setup_session()
item = store.provision(DatasetFiles("killed", Path(sys.argv[3])))
print(item.store_id, flush=True)
time.sleep(600)
"""


def test_backintel_clean_sweeps_a_killed_runs_users_and_databases(
    conformance_dataset: DatasetFiles, tmp_path: Path
) -> None:
    """A run killed with SIGKILL leaves its item's database and user; `backintel clean` finds
    the store's folder (its owner gone), starts the store from the folder's marker, and the
    store drops them."""
    data = tmp_path / "data"
    workdir = data / "stores" / "sqlalchemy" / "1"
    spec = f"sqlalchemy:{URL}"
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED, spec, str(workdir), str(conformance_dataset.parquet_dir)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        store_id = child.stdout.readline().strip() if child.stdout else ""
    finally:
        child.kill()
        child.wait()
    assert store_id
    assert leftover(None, store_id, None, workdir)
    assert (workdir / ".backintel-store.json").stat().st_mode & 0o077 == 0
    done = subprocess.run(
        [str(Path(sys.executable).parent / "backintel"), "clean", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "dropped sqlalchemy items of gone runs on mysql+pymysql://root@" in done.stdout
    assert not leftover(None, store_id, None, workdir)
    assert not workdir.exists()


@only(lambda case: case.family == "sqlalchemy")
def test_privileges_are_the_guard(item: ProvisionedStore) -> None:
    """As the item's user, with no statement check in between: writes, DDL, temporary tables,
    file access and other databases all fail on the server itself."""
    assert isinstance(item, SQLAlchemyItem)
    reader = sa.create_engine(item.reader, poolclass=sa.pool.NullPool)
    try:
        with reader.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM orders").scalar() == 250
            for sql in [
                "INSERT INTO orders (id) VALUES (999)",
                "UPDATE orders SET status = 'x'",
                "CREATE TABLE t2 (a INT)",
                "CREATE TEMPORARY TABLE t3 (a INT)",
                "DROP TABLE orders",
                "SELECT * FROM orders INTO OUTFILE '/tmp/backintel-evil.csv'",
                "SELECT * FROM mysql.user",
                "CREATE DATABASE bi_evil",
            ]:
                with pytest.raises(sa.exc.OperationalError, match="denied"):
                    conn.exec_driver_sql(sql)
            assert conn.exec_driver_sql("SELECT LOAD_FILE('/etc/passwd')").scalar() is None
            databases = {r[0] for r in conn.exec_driver_sql("SHOW DATABASES")}
    finally:
        reader.dispose()
    assert databases == {"information_schema", item.store_id}
    assert not Path("/tmp/backintel-evil.csv").exists()


@only(lambda case: case.family == "sqlalchemy")
@pytest.mark.parametrize(
    "sql",
    [
        "SET STATEMENT max_statement_time = 0 FOR SELECT 1",
        "SELECT * FROM orders INTO OUTFILE '/tmp/backintel-evil.csv'",
        "SHOW GRANTS",
        "SELECT 1; SELECT 2",
        "DO SLEEP(5)",
        "HANDLER orders OPEN",
    ],
)
def test_what_privileges_leave_open_is_refused(item: ProvisionedStore, sql: str) -> None:
    with item.connect() as session, pytest.raises(QueryRefused):
        session.run_sql(sql)


@only(lambda case: case.family == "sqlalchemy")
def test_reads_of_every_shape_run(item: ProvisionedStore) -> None:
    with item.connect() as session:
        assert session.run_sql("(SELECT 1 AS a) UNION ALL (SELECT 2)").rows == [(1,), (2,)]
        assert session.run_sql("WITH x AS (SELECT 3 AS a) SELECT a FROM x").rows == [(3,)]
        assert session.run_sql("SELECT '100%' AS p").rows == [("100%",)]
        assert session.tables_read("SELECT 42 AS x") == set()
        assert session.tables_read("WITH a AS (SELECT * FROM orders) SELECT * FROM a") == {"orders"}


@only(lambda case: case.family == "sqlalchemy")
def test_the_servers_own_statistics_update_leaves_the_fingerprint_as_it_was(
    store: Store, tmp_path: Path
) -> None:
    """InnoDB recalculates a freshly loaded table's statistics in the background some seconds
    after the load (50,000 rows: within 10 s), and `data_length` moves with them. The store
    analyses its tables after loading, so that recalculation (done here at once) is not taken
    for a changed database."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "p").mkdir()
    rows = 50_000
    table = pa.table({"id": range(rows), "v": [f"x{i % 97}" for i in range(rows)]})
    pq.write_table(table, tmp_path / "p" / "t.parquet")
    item = store.provision(DatasetFiles("analysed", tmp_path / "p"))
    try:
        assert isinstance(item, SQLAlchemyItem)
        before = item.fingerprint()
        with item.store.engine.begin() as conn:
            conn.execute(sa.text(f"ANALYZE TABLE `{item.database}`.`t`")).all()
        assert item.fingerprint() == before
    finally:
        item.teardown()
