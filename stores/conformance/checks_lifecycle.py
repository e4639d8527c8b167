"""Checks of a store's life: signatures, time limits, isolation, concurrency, probes, and
cleanup after a SIGKILL."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from stores.base import (
    DatasetFiles,
    ProvisionedStore,
    QueryError,
    QueryTimeout,
    Store,
    StoreError,
)
from stores.conformance.cases import NoHook, StoreCase, start_store
from stores.conformance.data import SLOW, normalised

__all__ = [
    "test_cleanup_after_sigkill",
    "test_concurrent_provisioning_from_threads",
    "test_fingerprint_is_stable_and_tells_datasets_apart",
    "test_fingerprint_sees_a_change_made_behind_the_store",
    "test_items_are_isolated_and_teardown_is_idempotent",
    "test_probe_moves_every_table",
    "test_timeout_interrupts_and_session_survives",
]


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


def test_fingerprint_sees_a_change_made_behind_the_store(
    case: StoreCase, store: Store, item_dataset: DatasetFiles
) -> None:
    """The signature checked before and after every trial changes when the data does."""
    if case.tamper is None:
        raise NoHook("the case gives no `tamper` hook to change data behind the store")
    victim = store.provision(item_dataset)
    try:
        before = victim.fingerprint()
        case.tamper(victim)
        after = victim.fingerprint()
    finally:
        victim.teardown()
    assert after.logical != before.logical
    assert after.physical != before.physical


def test_timeout_interrupts_and_session_survives(case: StoreCase, item: ProvisionedStore) -> None:
    with item.connect() as session:
        with pytest.raises(QueryTimeout):
            session.run_sql(case.slow_sql or SLOW)
        assert session.run_sql("SELECT count(*) AS n FROM customers").rows == [(10,)]


def test_items_are_isolated_and_teardown_is_idempotent(
    case: StoreCase, store: Store, item_dataset: DatasetFiles, item_other: DatasetFiles
) -> None:
    one, two = store.provision(item_dataset), store.provision(item_other)
    assert one.store_id != two.store_id
    assert one.display_id == f"{store.name}:{one.store_id}"
    assert re.fullmatch(r"bi_[0-9a-f]{12}", one.store_id)
    with one.connect() as s1, two.connect() as s2:
        assert s1.list_tables() == case.names(one, ["customers", "orders"])
        assert s2.list_tables() == case.names(two, ["customers", "extra", "orders"])
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
    case: StoreCase, store: Store, item_dataset: DatasetFiles, tmp_path: Path
) -> None:
    fresh = start_store(case.spec, tmp_path / "fresh", path=case.store_class)

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


def test_probe_moves_every_table(
    case: StoreCase,
    store: Store,
    item: ProvisionedStore,
    item_dataset: DatasetFiles,
    tmp_path: Path,
) -> None:
    """The evidence probe's copy differs from the item in every table, and evidence reads
    it through the same read-only sessions."""
    if case.probe is not None:
        opened = case.probe(store, item, item_dataset, tmp_path)
    elif callable(getattr(item, "probe", None)):
        opened = _torn_down(item.probe(1))  # type: ignore[attr-defined]
    else:
        raise NoHook("the store's items have no probe(salt) and the case gives no `probe` hook")
    with opened as probe, item.connect() as mine, probe.connect() as moved:
        for table in case.names(item, item_dataset.tables):
            sql = f"SELECT * FROM {table}"
            ours = sorted(normalised(mine.run_sql(sql, max_rows=10_000).rows), key=repr)
            theirs = sorted(normalised(moved.run_sql(sql, max_rows=10_000).rows), key=repr)
            assert ours != theirs, f"the probe keeps {table} as it is"


class _torn_down:  # noqa: N801 - a context manager named for what it guarantees
    def __init__(self, probe: ProvisionedStore) -> None:
        self.probe = probe

    def __enter__(self) -> ProvisionedStore:
        return self.probe

    def __exit__(self, *exc: object) -> None:
        self.probe.teardown()


_KILLED = """
import sys, time
from pathlib import Path
from stores.base import DatasetFiles
from stores.conformance.cases import store_class
store = store_class(sys.argv[1], sys.argv[4] or None)(Path(sys.argv[2]))
store.setup_session()
item = store.provision(DatasetFiles("killed", Path(sys.argv[3])))
print(item.store_id, item.mount_path or "", flush=True)
time.sleep(600)
"""


def test_cleanup_after_sigkill(
    case: StoreCase, store: Store, item_dataset: DatasetFiles, tmp_path: Path
) -> None:
    """A process killed with SIGKILL after provisioning leaves nothing once swept (by the
    case's `sweep`, else by the next session's setup on the same workdir). The workdir is laid
    out as the harness lays one: `<data>/stores/<store>/<process>`."""
    workdir = tmp_path / "data" / "stores" / case.family / "killed"
    args = [sys.executable, "-c", _KILLED, case.spec, str(workdir), str(item_dataset.parquet_dir)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}  # the test's imports too
    child = subprocess.Popen(
        [*args, case.store_class or ""], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        line = child.stdout.readline().split() if child.stdout else []
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert line, f"the child exited ({child.returncode}) before provisioning"
    store_id, mount = line[0], Path(line[1]) if len(line) > 1 else None
    assert case.leftover(store, store_id, mount, workdir), (
        "nothing was made to sweep: the check is void"
    )
    if case.sweep is not None:
        case.sweep(workdir)
    else:
        start_store(case.spec, workdir, path=case.store_class).teardown_session()
    assert not case.leftover(store, store_id, mount, workdir), f"{store_id} is still there"
