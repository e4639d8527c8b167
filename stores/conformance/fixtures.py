"""The suite's parametrization and fixtures: one module-scoped store per declared case.

The importing module names its cases in `CONFORMANCE_STORES` (a list of `StoreCase`);
`pytest_generate_tests` gives every check that uses `case` one parameter per case (the checks
marked `only(...)` only the cases they apply to), each carrying its deviations as strict
xfail marks.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest

from stores.base import DatasetFiles, ProvisionedStore, Store
from stores.conformance.cases import StoreCase, start_store
from stores.conformance.data import make_dataset

__all__ = [
    "conformance_dataset",
    "conformance_other",
    "item",
    "item_dataset",
    "item_other",
    "pytest_generate_tests",
    "reference",
    "store",
]

ATTRIBUTE = "CONFORMANCE_STORES"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" not in metafunc.fixturenames:
        return
    cases: list[StoreCase] | None = getattr(metafunc.module, ATTRIBUTE, None)
    if cases is None:
        raise pytest.UsageError(
            f"{metafunc.module.__name__} imports the conformance suite but declares no "
            f"{ATTRIBUTE} (a list of stores.conformance.StoreCase)"
        )
    known = {name for name in dir(metafunc.module) if name.startswith("test_")}
    for one in cases:
        for dev in one.deviations:
            if dev.test not in known:
                raise pytest.UsageError(
                    f"{ATTRIBUTE}: case {one.id!r} declares a deviation from {dev.test!r}, "
                    f"which is no check of {metafunc.module.__name__}"
                )
    applies = getattr(metafunc.function, "conformance_applies", lambda _case: True)
    name = metafunc.function.__name__
    params = [pytest.param(c, id=c.id, marks=c.marks(name)) for c in cases if applies(c)]
    metafunc.parametrize("case", params, scope="module")


@pytest.fixture(scope="session")
def conformance_dataset(tmp_path_factory: pytest.TempPathFactory) -> DatasetFiles:
    return make_dataset(tmp_path_factory.mktemp("ds-main"), "conformance", 250)


@pytest.fixture(scope="session")
def conformance_other(tmp_path_factory: pytest.TempPathFactory) -> DatasetFiles:
    return make_dataset(tmp_path_factory.mktemp("ds-other"), "other", 7, extra=True)


@pytest.fixture(scope="session")
def conformance_seconds_datasets(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[DatasetFiles, DatasetFiles]:
    """The two datasets with whole-second timestamps."""
    main = make_dataset(tmp_path_factory.mktemp("ds-main-s"), "conformance", 250, False, True)
    other = make_dataset(tmp_path_factory.mktemp("ds-other-s"), "other", 7, True, True)
    return main, other


@pytest.fixture(scope="module")
def item_dataset(
    request: pytest.FixtureRequest, case: StoreCase, conformance_dataset: DatasetFiles
) -> DatasetFiles:
    """The main dataset as the case's store can hold it."""
    if case.whole_seconds:
        return request.getfixturevalue("conformance_seconds_datasets")[0]  # type: ignore[no-any-return]
    return conformance_dataset


@pytest.fixture(scope="module")
def item_other(
    request: pytest.FixtureRequest, case: StoreCase, conformance_other: DatasetFiles
) -> DatasetFiles:
    """The other dataset (7 orders and a table `extra`) as the case's store can hold it."""
    if case.whole_seconds:
        return request.getfixturevalue("conformance_seconds_datasets")[1]  # type: ignore[no-any-return]
    return conformance_other


@pytest.fixture(scope="module")
def store(
    request: pytest.FixtureRequest, case: StoreCase, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Store]:
    for name in case.fixtures:
        request.getfixturevalue(name)
    started = start_store(
        case.spec, tmp_path_factory.mktemp(f"store-{case.family}"), path=case.store_class
    )
    yield started
    started.teardown_session()


@pytest.fixture(scope="module")
def item(store: Store, item_dataset: DatasetFiles) -> Iterator[ProvisionedStore]:
    provisioned = store.provision(item_dataset)
    yield provisioned
    provisioned.teardown()


@pytest.fixture(scope="module")
def reference(item_dataset: DatasetFiles) -> Iterator[duckdb.DuckDBPyConnection]:
    """Plain DuckDB over the canonical Parquet: the answers every store must give."""
    conn = duckdb.connect()
    for table in item_dataset.tables:
        path = item_dataset.parquet_dir / f"{table}.parquet"
        conn.execute(f"CREATE VIEW {table} AS SELECT * FROM '{path}'")
    yield conn
    conn.close()
