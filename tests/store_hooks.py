"""The hooks the shipped stores give the conformance suite (`tests/test_store_conformance.py`):
how data is changed behind each store, the evidence stage's probe, `backintel clean`'s sweep
and what a killed process leaves."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from pytest_backintel.evidence.probe import Probes
from pytest_backintel.run.cleanup import clean_stale
from stores.base import DatasetFiles, ProvisionedStore, Store
from stores.conformance import NoHook

__all__ = ["evidence_probe", "folder_left", "pg_leftover", "shown", "sweep", "tamper"]


def shown(item: ProvisionedStore, tables: list[str]) -> list[str]:
    """The table names a session lists: `<alias>.<table>` per component for `multi`."""
    if item.backend != "multi":
        return tables
    return sorted(f"{alias}.{t}" for alias in item.components for t in tables)  # type: ignore[attr-defined]


@contextlib.contextmanager
def evidence_probe(
    store: Store, item: ProvisionedStore, dataset: DatasetFiles, tmp: Path
) -> Iterator[ProvisionedStore]:
    """The evidence stage's data probe of `dataset` on `store` (its first salt)."""
    probes = Probes(lambda: tmp / "probes")
    try:
        built = probes.get(store.name, store, dataset)
        if not built:
            raise NoHook(f"the evidence stage builds no data probe on {store.name}")
        yield built[0].store
    finally:
        probes.teardown()


def sweep(workdir: Path) -> None:
    """`backintel clean`'s sweep of the data folder the killed store's workdir is in (the
    PostgreSQL server's only for a store that makes databases there)."""
    clean_stale(workdir.parents[2], postgres=workdir.parent.name == "postgres")


def folder_left(store: Store, store_id: str, mount: Path | None, workdir: Path) -> bool:
    """The killed process's folder is still there (a store whose items live only in it)."""
    return workdir.exists()


def pg_leftover(store: Store, store_id: str, mount: Path | None, workdir: Path) -> bool:
    import psycopg

    with psycopg.connect(store.dsn, autocommit=True) as admin:  # type: ignore[attr-defined]
        rows = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (store_id,))
        return rows.fetchone() is not None


def tamper(item: ProvisionedStore) -> None:
    """Delete order 1 behind the store's back, as a superuser or file owner would."""
    if item.backend == "multi":
        tamper(next(iter(item.components.values())))  # type: ignore[attr-defined]
        return
    if item.backend == "iceberg":
        (target,) = (item.root / "warehouse" / "main" / "orders" / "data").glob("*.parquet")  # type: ignore[attr-defined]
        target.chmod(0o644)
        pq.write_table(pq.read_table(target).slice(1), target)
        return
    if item.backend == "iceberg-s3":
        s3 = item.endpoint.filesystem()  # type: ignore[attr-defined]
        (key,) = [k for k in item.objects() if "/orders/data/" in k]  # type: ignore[attr-defined]
        with s3.open_input_file(key) as f:
            table, size = pq.read_table(f), f.size()
        with s3.open_output_stream(key) as f:  # the manifest records the size: keep it
            f.write(same_size_parquet(table.slice(1), size))
        return
    if item.backend == "clickhouse":
        item.engine.run(f"DELETE FROM {item.qualified('orders')} WHERE id = 1")  # type: ignore[attr-defined]
        return
    if item.backend == "clickhouse-server":
        admin = item.store.admin  # type: ignore[attr-defined]
        admin.post(f"ALTER TABLE {item.qualified('orders')} DELETE WHERE id = 1")  # type: ignore[attr-defined]
        done = (
            "SELECT count() FROM system.mutations "
            f"WHERE database = '{item.store_id}' AND NOT is_done"
        )
        while admin.query(done).rows != [(0,)]:  # 18.16 has no mutations_sync
            time.sleep(0.05)
        return
    if item.backend == "postgres":
        import psycopg

        dsn = item._store.dsn.rsplit("/", 1)[0]  # type: ignore[attr-defined]
        with psycopg.connect(f"{dsn}/{item.store_id}", autocommit=True) as conn:
            conn.execute("DELETE FROM orders WHERE id = 1")
        return
    path = item.mount_path
    assert path is not None
    if path.is_file() and path.suffix == ".duckdb":
        path.chmod(0o644)
        with duckdb.connect(str(path)) as conn:
            conn.execute("DELETE FROM orders WHERE id = 1")
        return
    if path.is_file():
        path.chmod(0o644)
        with sqlite3.connect(path) as conn:
            conn.execute("DELETE FROM orders WHERE id = 1")
        return
    target = next(p for p in path.iterdir() if p.stem == "orders" or p.suffix == ".duckdb")
    target.chmod(0o644)
    if target.suffix == ".duckdb":
        with duckdb.connect(str(target)) as conn:
            conn.execute("DELETE FROM orders WHERE id = 1")
    elif target.suffix == ".parquet":
        table = pq.read_table(target)
        pq.write_table(table.slice(1), target)
    else:
        lines = target.read_text().splitlines(keepends=True)
        target.write_text("".join(lines[:-1]))


def same_size_parquet(table: pa.Table, size: int) -> bytes:
    """`table` as Parquet of exactly `size` bytes, padded in its key-value metadata."""
    pad = 0
    for _ in range(8):
        sink = pa.BufferOutputStream()
        with pq.ParquetWriter(sink, table.schema, compression="zstd", store_schema=False) as out:
            out.write_table(table)
            out.add_key_value_metadata({"pad": "x" * pad})
        data = sink.getvalue().to_pybytes()
        if len(data) == size:
            return data
        pad += size - len(data)
        assert pad >= 0, "the tampered table must be smaller than the original"
    raise AssertionError(f"could not pad a Parquet file to {size} bytes")


def ch_server_leftover(store: Store, store_id: str, mount: Path | None, workdir: Path) -> bool:
    """The killed item's database is still on the ClickHouse server."""
    sql = f"SELECT count() FROM system.databases WHERE name = '{store_id}'"
    return bool(store.admin.query(sql).rows != [(0,)])  # type: ignore[attr-defined]
