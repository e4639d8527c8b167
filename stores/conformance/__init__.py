"""A conformance suite for stores, public for third-party store packages to import.

A package's test module imports the checks and declares its stores, each with its
deviations (a mandatory reason and the exception expected; strict: a declared deviation that
passes or raises something else fails, and so does an undeclared failure):

    from stores.conformance import NoHook, StoreCase, deviation
    from stores.conformance.suite import *  # noqa: F403

    CONFORMANCE_STORES = [
        StoreCase("mystore", deviations=[
            deviation("test_probe_moves_every_table", reason="no probe views yet",
                      raises=NoHook, kind="notimpl"),
        ]),
    ]

`BACKINTEL_REQUIRE` (comma list) turns a store that cannot start into a failure instead of a
skip. See docs/stores.md.
"""

import pytest

pytest.register_assert_rewrite(
    "stores.conformance.checks_data", "stores.conformance.checks_lifecycle"
)

from stores.conformance.cases import (  # noqa: E402 - after the assertion rewrite is registered
    REQUIRE_ENV,
    Deviation,
    NoHook,
    StoreCase,
    deviation,
    is_required,
    only,
    start_store,
)
from stores.conformance.data import make_dataset, normalise, normalised  # noqa: E402

__all__ = [
    "REQUIRE_ENV",
    "Deviation",
    "NoHook",
    "StoreCase",
    "deviation",
    "is_required",
    "make_dataset",
    "normalise",
    "normalised",
    "only",
    "start_store",
]
