"""The `iceberg-s3` backend on a local moto S3 server: credentials the analyst cannot read or
change, no reach outside the item's prefix, the snapshot id in the fingerprint, and a user's
own endpoint by URL."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stores.base import DatasetFiles, QueryRefused, StoreError
from stores.iceberg.s3 import ICEBERG_DB, NAMESPACE, IcebergS3Store, ProvisionedIcebergS3
from stores.iceberg.s3_endpoint import ENDPOINT_ENV, endpoint_from_env


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> DatasetFiles:
    root = tmp_path_factory.mktemp("s3-data")
    pq.write_table(pa.table({"id": pa.array([1, 2, 3], pa.int64())}), root / "orders.parquet")
    return DatasetFiles("s3", root)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcebergS3Store]:
    backend = IcebergS3Store(tmp_path_factory.mktemp("s3-store"), statement_timeout_s=5)
    backend.setup_session()
    yield backend
    backend.teardown_session()


@pytest.fixture(scope="module")
def item(store: IcebergS3Store, dataset: DatasetFiles) -> Iterator[ProvisionedIcebergS3]:
    provisioned = store.provision(dataset)
    yield provisioned
    provisioned.teardown()


def test_the_local_server_is_on_loopback_and_holds_the_warehouse(
    store: IcebergS3Store, item: ProvisionedIcebergS3
) -> None:
    assert urlsplit(store.endpoint.url).hostname == "127.0.0.1"
    keys = item.objects()
    assert any(k.endswith(".metadata.json") for k in keys)
    assert any("/orders/data/" in k and k.endswith(".parquet") for k in keys)
    assert all(k.startswith(f"{store.endpoint.bucket}/{item.store_id}/") for k in keys)
    assert not list(item.root.rglob("*.parquet"))  # nothing of the data is local
    with item.connect() as session:
        assert session.run_sql("SELECT sum(id) AS s FROM orders").rows == [(6,)]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM duckdb_secrets()",
        "SELECT name FROM duckdb_secrets(redact = false)",
        "SELECT 1 AS a WHERE EXISTS (SELECT * FROM which_secret('s3://backintel/x', 's3'))",
        "CREATE SECRET evil (TYPE S3, KEY_ID 'a', SECRET 'b')",
        "DROP SECRET backintel_s3",
        "SET s3_endpoint = 'example.com'",
        "SET s3_access_key_id = 'a'",
        "RESET allowed_directories",
    ],
)
def test_credentials_cannot_be_read_or_changed(item: ProvisionedIcebergS3, sql: str) -> None:
    before = item.fingerprint()
    with item.connect() as session:
        with pytest.raises(QueryRefused):
            session.run_sql(sql)
        assert session.run_sql("SELECT count(*) AS n FROM orders").rows == [(3,)]
    assert item.fingerprint() == before


def test_the_engine_keeps_the_secret_redacted_and_settings_locked(
    item: ProvisionedIcebergS3,
) -> None:
    conn = item.engine_connection()
    try:
        with pytest.raises(duckdb.Error, match="unredacted"):
            conn.execute("SELECT * FROM duckdb_secrets(redact = false)").fetchall()
        with pytest.raises(duckdb.Error, match="locked"):
            conn.execute("SET s3_endpoint = 'example.com'")
        (shown,) = conn.execute("SELECT secret_string FROM duckdb_secrets()").fetchone() or ("",)
        assert item.endpoint.secret not in shown
        assert "secret=redacted" in shown
    finally:
        conn.close()


def test_no_reach_outside_the_items_prefix(
    store: IcebergS3Store, item: ProvisionedIcebergS3, dataset: DatasetFiles
) -> None:
    other = store.provision(dataset)
    try:
        (data,) = [k for k in other.objects() if k.endswith(".parquet")]
        with item.connect() as session:
            for sql in [
                f"SELECT count(*) AS n FROM read_parquet('s3://{data}')",
                f"SELECT * FROM glob('s3://{store.endpoint.bucket}/*')",
                "SELECT * FROM read_csv('http://127.0.0.1:1/x.csv')",
                "SELECT * FROM read_csv('/etc/passwd')",
                f"COPY (SELECT 1) TO '{item.prefix}evil.csv'",
            ]:
                with pytest.raises(QueryRefused):
                    session.run_sql(sql)
        assert not any(k.endswith("evil.csv") for k in item.objects())
    finally:
        other.teardown()
    assert other.objects() == []


def test_the_snapshot_id_is_in_the_fingerprint(
    store: IcebergS3Store, dataset: DatasetFiles
) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    victim = store.provision(dataset)
    try:
        ((location, snapshot),) = victim.snapshot_ids().values()
        assert isinstance(snapshot, int)
        assert location.startswith(victim.prefix)
        before = victim.fingerprint()
        (victim.root / ICEBERG_DB).chmod(0o644)
        catalog = SqlCatalog(
            "backintel",
            uri=f"sqlite:///{victim.root / ICEBERG_DB}",
            warehouse=victim.prefix.rstrip("/"),
            **store.endpoint.pyiceberg_properties(),
        )
        table = catalog.load_table((NAMESPACE, "orders"))
        table.append(pa.table({"id": pa.array([4], pa.int64())}))
        catalog.engine.dispose()
        ((_, newer),) = victim.snapshot_ids().values()
        assert newer != snapshot
        assert victim.fingerprint().physical != before.physical
    finally:
        victim.teardown()


def test_a_users_own_endpoint_by_url(
    store: IcebergS3Store, dataset: DatasetFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pointed at an endpoint by `BACKINTEL_S3_ENDPOINT`, the store starts no server of its own."""
    monkeypatch.setenv(ENDPOINT_ENV, store.endpoint.url)
    monkeypatch.setenv("BACKINTEL_S3_BUCKET", "users-own")
    monkeypatch.setenv("BACKINTEL_S3_KEY_ID", "someone")
    monkeypatch.setenv("BACKINTEL_S3_SECRET", "something")
    own = IcebergS3Store(tmp_path)
    own.setup_session()
    try:
        assert own.endpoint.url == store.endpoint.url
        assert not list(tmp_path.glob("moto-*.log"))
        provisioned = own.provision(dataset)
        assert all(k.startswith("users-own/") for k in provisioned.objects())
        with provisioned.connect() as session:
            assert session.run_sql("SELECT count(*) AS n FROM orders").rows == [(3,)]
        provisioned.teardown()
    finally:
        own.teardown_session()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({ENDPOINT_ENV: "127.0.0.1:9000"}, "not an http"),
        ({ENDPOINT_ENV: "http://127.0.0.1:9000"}, "BACKINTEL_S3_KEY_ID"),
    ],
)
def test_a_bad_endpoint_setting_is_named(
    env: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("BACKINTEL_S3_KEY_ID", raising=False)
    with pytest.raises(StoreError, match=message):
        endpoint_from_env()


def test_the_local_server_stops_with_the_session(tmp_path: Path) -> None:
    backend = IcebergS3Store(tmp_path)
    backend.setup_session()
    port = urlsplit(backend.endpoint.url).port
    assert port is not None
    assert [p.name for p in tmp_path.glob("moto-*.log")] == [f"moto-{port}.log"]
    backend.teardown_session()
    assert not list(tmp_path.glob("moto-*.log"))
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), 1):
        pass


def test_the_local_server_outlives_the_thread_that_set_the_store_up(tmp_path: Path) -> None:
    """moto dies with the thread that forked it (`PR_SET_PDEATHSIG`): a store set up by a
    thread that has ended (a probe built ahead, a trial pool's worker) keeps its server."""
    import threading
    import time

    backend = IcebergS3Store(tmp_path)
    starter = threading.Thread(target=backend.setup_session)
    starter.start()
    starter.join()
    while Path(f"/proc/self/task/{starter.native_id}").exists():  # gone from the kernel too
        time.sleep(0.01)
    time.sleep(0.5)  # the death signal's delivery
    try:
        port = urlsplit(backend.endpoint.url).port
        assert port is not None
        with socket.create_connection(("127.0.0.1", port), 2):
            pass
    finally:
        backend.teardown_session()
