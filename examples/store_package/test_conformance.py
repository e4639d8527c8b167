"""The conformance suite over this package's store, as its own test module runs it."""

import sqlite3

from stores.base import ProvisionedStore
from stores.conformance import NoHook, StoreCase, deviation
from stores.conformance.suite import *  # noqa: F403


def tamper(item: ProvisionedStore) -> None:
    """Delete order 1 as the file's owner would."""
    path = item.mount_path
    path.chmod(0o644)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM orders WHERE id = 1")
    conn.close()


CONFORMANCE_STORES = [
    StoreCase(
        "readonly-sqlite",
        store_class="readonly_sqlite:ReadOnlySQLiteStore",
        tamper=tamper,
        deviations=[
            deviation(
                "test_probe_moves_every_table",
                reason="this store serves no perturbed probe of an item",
                raises=NoHook,
                kind="notimpl",
            ),
            deviation(
                "test_cleanup_after_sigkill",
                reason="a killed process's files are left for `backintel clean` to remove",
                raises=AssertionError,
                kind="notimpl",
            ),
        ],
    )
]
