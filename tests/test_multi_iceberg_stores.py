"""What the conformance suite does not show about `multi`, `iceberg`, option-taking backend
names and the throwaway PostgreSQL cluster (`BACKINTEL_PG_DSN=initdb`)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stores.base import DatasetFiles, QueryError, QueryRefused, StoreError
from stores.iceberg.store import IcebergStore, snapshot_ids
from stores.multi.store import SUPPORTED, Component, MultiStore, component_dataset, parse_spec
from stores.postgres.cluster import find_binary
from stores.postgres.store import PostgresStore
from stores.registry import UnknownStoreError, load_store_class

ALIAS = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda a: a not in {"main", "temp", "system", "memory"}
)


@given(st.lists(st.tuples(st.sampled_from(SUPPORTED), ALIAS), min_size=1, max_size=4,
                unique_by=lambda c: c[1]))  # fmt: skip
def test_spec_round_trips(parts: list[tuple[str, str]]) -> None:
    spec = "+".join(f"{b}:{a}" for b, a in parts)
    assert parse_spec(spec) == [Component(b, a) for b, a in parts]


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("", "needs its components"),
        ("sqlite", "not <backend>:<alias>"),
        ("sqlite:a+sqlite:a", "used twice"),
        ("mysql:a", "cannot be attached"),
        ("multi:sqlite:a", "cannot be attached"),
        ("sqlite:Main", "must match"),
        ("sqlite:main", "must match"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_spec(spec)


def test_registry_passes_options_after_the_first_colon() -> None:
    cls = load_store_class("multi:sqlite:a+duckdb:b")
    assert issubclass(cls, MultiStore)
    assert cls.spec == "sqlite:a+duckdb:b"
    with pytest.raises(StoreError, match="cannot be attached"):
        load_store_class("multi:nosuch:a")
    with pytest.raises(UnknownStoreError, match="takes no options"):
        load_store_class("sqlite:x")
    with pytest.raises(UnknownStoreError, match="Did you mean 'multi'"):
        load_store_class("mullti:sqlite:a")
    with pytest.raises(StoreError, match="needs its components"):
        load_store_class("multi")(Path("/nonexistent"))


def _parquet(folder: Path, tables: dict[str, pa.Table]) -> Path:
    folder.mkdir(parents=True)
    for name, table in tables.items():
        pq.write_table(table, folder / f"{name}.parquet")
    return folder


@pytest.fixture
def split_dataset(tmp_path: Path) -> DatasetFiles:
    orders = pa.table({"id": [1, 2, 3], "customer_id": [10, 20, 10], "amount": [5.0, 7.5, 1.0]})
    customers = pa.table({"customer_id": [10, 20], "state": ["SP", "RJ"]})
    return DatasetFiles(
        "split",
        _parquet(tmp_path / "all", {"orders": orders, "customers": customers}),
        extra={
            "parquet:sales": _parquet(tmp_path / "sales", {"orders": orders}),
            "parquet:crm": _parquet(tmp_path / "crm", {"customers": customers}),
        },
    )


def test_component_dataset_takes_the_declared_part(split_dataset: DatasetFiles) -> None:
    assert component_dataset(split_dataset, "sales").tables == ["orders"]
    assert component_dataset(split_dataset, "crm").tables == ["customers"]
    with pytest.raises(StoreError, match="declares crm, sales"):
        component_dataset(split_dataset, "billing")
    whole = DatasetFiles("whole", split_dataset.parquet_dir)
    assert component_dataset(whole, "anything") is whole


@pytest.fixture
def multi(tmp_path: Path) -> Iterator[MultiStore]:
    store = load_store_class("multi:duckdb:sales+iceberg:crm")(tmp_path / "multi")
    assert isinstance(store, MultiStore)
    store.setup_session()
    yield store
    store.teardown_session()


def test_multi_joins_across_components_and_tears_all_down(
    multi: MultiStore, split_dataset: DatasetFiles
) -> None:
    item = multi.provision(split_dataset)
    with item.connect() as session:
        assert session.list_tables() == ["crm.customers", "sales.orders"]
        assert session.describe_table("customers").name == "crm.customers"
        with pytest.raises(QueryError, match="unknown"):
            session.describe_table("sales.customers")
        rows = session.run_sql(
            "SELECT c.state, sum(o.amount) AS total FROM sales.orders o "
            "JOIN crm.customers c USING (customer_id) GROUP BY 1 ORDER BY 1"
        ).rows
        assert rows == [("RJ", 7.5), ("SP", 6.0)]
        unqualified = session.run_sql("SELECT count(*) AS n FROM orders, customers").rows
        assert unqualified == [(6,)]
        with pytest.raises(QueryRefused):
            session.run_sql("DETACH crm")
    roots = [c.mount_path for c in item.components.values()]
    assert all(p is not None and p.exists() for p in roots)
    item.teardown()
    assert not any(p is not None and p.exists() for p in roots)
    item.teardown()


def test_multi_refuses_a_dataset_without_the_spec_parts(
    multi: MultiStore, split_dataset: DatasetFiles, tmp_path: Path
) -> None:
    other = DatasetFiles(
        "other", split_dataset.parquet_dir, extra={"parquet:sales": split_dataset.parquet_dir}
    )
    with pytest.raises(StoreError, match="no component 'crm'"):
        multi.provision(other)
    assert sorted(p.name for p in (tmp_path / "multi").iterdir() if p.name.startswith("bi_")) == []


def test_iceberg_snapshot_is_part_of_the_fingerprint(
    tmp_path: Path, split_dataset: DatasetFiles
) -> None:
    """A commit through the catalog changes the physical fingerprint (new snapshot id) but not
    what the analyst's views show, which stay pinned to the provisioned snapshot."""
    from stores.iceberg.store import NAMESPACE, open_catalog

    store = IcebergStore(tmp_path / "ice")
    store.setup_session()
    item = store.provision(split_dataset)
    before = item.fingerprint()
    first = snapshot_ids(item.root)["orders"]
    for path in item.root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    catalog = open_catalog(item.root)
    catalog.load_table((NAMESPACE, "orders")).append(
        pa.table({"id": [4], "customer_id": [20], "amount": [2.0]})
    )
    catalog.engine.dispose()
    after = item.fingerprint()
    assert snapshot_ids(item.root)["orders"][1] != first[1]
    assert after.physical != before.physical
    assert after.logical == before.logical
    with item.connect() as session:
        assert session.run_sql("SELECT count(*) AS n FROM orders").rows == [(3,)]
    item.teardown()
    assert not item.root.exists()


def test_initdb_cluster_starts_serves_and_is_removed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, split_dataset: DatasetFiles
) -> None:
    try:
        find_binary("initdb")
    except StoreError as exc:
        pytest.skip(str(exc))
    monkeypatch.setenv("BACKINTEL_PG_DSN", "initdb")
    store = PostgresStore(tmp_path / "pg")
    store.setup_session()
    cluster = store._cluster
    assert cluster is not None
    assert cluster.root is not None
    assert cluster.port is not None
    root, port = cluster.root, cluster.port
    assert store.dsn == f"postgresql://postgres@127.0.0.1:{port}/postgres"
    try:
        item = store.provision(split_dataset)
        with item.connect() as session:
            assert session.run_sql("SELECT count(*) AS n FROM orders").rows == [(3,)]
        item.teardown()
    finally:
        store.teardown_session()
    assert not root.exists()
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), 1):
        pass
    store.teardown_session()  # twice is fine
