"""Everything a test module imports to run the conformance suite:

    from stores.conformance.suite import *  # noqa: F403
    CONFORMANCE_STORES = [StoreCase("mystore", deviations=[deviation(...)])]

The checks, the fixtures they use and `pytest_generate_tests`, which parametrizes them over
`CONFORMANCE_STORES`.
"""

from __future__ import annotations

from stores.conformance.cases import StoreCase, deviation, only
from stores.conformance.checks_data import (
    test_file_reads_are_refused,
    test_queries_agree_with_reference,
    test_reference_is_sane,
    test_row_cap_and_truncation,
    test_state_changes_are_refused,
    test_tables_and_descriptions,
    test_type_round_trips,
)
from stores.conformance.checks_lifecycle import (
    test_cleanup_after_sigkill,
    test_concurrent_provisioning_from_threads,
    test_fingerprint_is_stable_and_tells_datasets_apart,
    test_fingerprint_sees_a_change_made_behind_the_store,
    test_items_are_isolated_and_teardown_is_idempotent,
    test_probe_moves_every_table,
    test_timeout_interrupts_and_session_survives,
)
from stores.conformance.fixtures import (
    conformance_dataset,
    conformance_other,
    conformance_seconds_datasets,
    item,
    item_dataset,
    item_other,
    pytest_generate_tests,
    reference,
    store,
)

__all__ = [
    "StoreCase",
    "conformance_dataset",
    "conformance_other",
    "conformance_seconds_datasets",
    "deviation",
    "item",
    "item_dataset",
    "item_other",
    "only",
    "pytest_generate_tests",
    "reference",
    "store",
    "test_cleanup_after_sigkill",
    "test_concurrent_provisioning_from_threads",
    "test_file_reads_are_refused",
    "test_fingerprint_is_stable_and_tells_datasets_apart",
    "test_fingerprint_sees_a_change_made_behind_the_store",
    "test_items_are_isolated_and_teardown_is_idempotent",
    "test_probe_moves_every_table",
    "test_queries_agree_with_reference",
    "test_reference_is_sane",
    "test_row_cap_and_truncation",
    "test_state_changes_are_refused",
    "test_tables_and_descriptions",
    "test_timeout_interrupts_and_session_survives",
    "test_type_round_trips",
]
