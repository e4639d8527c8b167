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

import sqlalchemy as sa

from stores.base import DatasetFiles, ProvisionedStore, Store
from stores.conformance import StoreCase
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
