"""The conformance suite (`stores.conformance`) over every shipped store, plus the checks
that concern only some of them.

Each backend in `stores.registry.available_stores()` runs the suite as a third-party package
would (`from stores.conformance.suite import *`), with its deviations declared below, each with
its reason and the exception it expects. `multi` runs as the specs in `MULTI_SPECS` (two
attached components each, every alias given the whole dataset; unqualified names resolve
through the search path to the first). The `sqlalchemy` store runs in
`tests/test_store_sqlalchemy.py`, against the server it needs.

Checks that concern only some backends are generated only for those (`only(...)`), never
skipped. A backend that cannot run skips with the reason, or fails when named in
`BACKINTEL_REQUIRE` (comma list; `multi` there requires every multi spec).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from datetime import date, datetime
from decimal import Decimal
from multiprocessing import get_context
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pytest_backintel.evidence.probe import Probes
from pytest_backintel.run.cleanup import clean_stale
from stores.base import DatasetFiles, ProvisionedStore, Store, StoreError
from stores.conformance import (
    Deviation,
    NoHook,
    StoreCase,
    deviation,
    is_required,
    make_dataset,
    normalise,
    only,
    start_store,
)
from stores.conformance.suite import *  # noqa: F403
from stores.registry import UnknownStoreError, available_stores, load_store_class

MULTI_SPECS = ["multi:sqlite:left_db+postgres:right_db", "multi:iceberg:ice_db+duckdb:duck_db"]
OUTSIDE = {"multi", "sqlalchemy"}
"""Registered stores that run as other specs here, or in a module of their own."""
BACKENDS = [b for b in available_stores() if b not in OUTSIDE] + MULTI_SPECS
DUCKDB_FAMILY = {"duckdb", "lake-parquet", "files", "files-mixed", "iceberg", "iceberg-s3", "multi"}


def family(spec: str) -> str:
    """The registered backend of a spec (`multi:...` -> `multi`)."""
    return spec.split(":", 1)[0]


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


def test_normalise_folds_backend_forms_and_keeps_differences() -> None:
    assert normalise(1) == normalise(1.0) == normalise(Decimal("1.00"))
    assert normalise(datetime(2024, 1, 2, 3, 4)) == normalise("2024-01-02 03:04:00")
    assert normalise(date(2024, 1, 2)) == normalise("2024-01-02")
    assert normalise(None) is None
    assert normalise(0) != normalise(None)
    assert normalise(Decimal("1.01")) != normalise(1)
    assert normalise("2024-01-02") != normalise("2024-01-03")


def _provision_in_process(name: str, workdir: str, parquet_dir: str) -> tuple[str, int] | str:
    try:
        store = load_store_class(name)(Path(workdir))
        store.setup_session()
    except (StoreError, UnknownStoreError, ImportError) as exc:
        return f"cannot run: {exc}"
    provisioned = store.provision(DatasetFiles("proc", Path(parquet_dir)))
    with provisioned.connect() as session:
        count = session.run_sql("SELECT count(*) AS n FROM orders").rows[0][0]
    provisioned.teardown()
    store.teardown_session()
    return provisioned.store_id, int(count)  # type: ignore[arg-type]


def test_concurrent_provisioning_from_processes(
    request: pytest.FixtureRequest, conformance_dataset: DatasetFiles, tmp_path: Path
) -> None:
    """Two processes per backend share one workdir, so they race on the template lock (multi
    specs are left out: their components are these same backends)."""
    single = [name for name in BACKENDS if family(name) != "multi"]
    request.getfixturevalue("clickhouse_server")
    seconds = request.getfixturevalue("_seconds_datasets")[0]
    main = conformance_dataset
    jobs = [
        (
            name,
            str(tmp_path / name),
            str((seconds if whole_seconds(name) else main).parquet_dir),
        )
        for name in single
        for _ in "ab"
    ]
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        results = list(pool.map(_provision_in_process, *zip(*jobs, strict=True)))
    for (name, *_), result in zip(jobs, results, strict=True):
        if isinstance(result, str):
            assert not is_required(name), f"{name}: {result}"
            continue
        assert result[1] == 250, name
    ids = [r[0] for r in results if not isinstance(r, str)]
    assert len(ids) == len(set(ids))


ENGINE_REFUSES = [
    "INSERT INTO orders (id) VALUES (1)",
    "CREATE TABLE t2 (a INTEGER)",
    "DROP VIEW orders",
    "SET threads = 2",
    "SET enable_external_access = true",
    "RESET allowed_directories",
    "ATTACH '/tmp/backintel-evil.duckdb' AS evil",
    "COPY (SELECT 1) TO '/tmp/backintel-evil.csv'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SELECT * FROM read_csv('/etc/passwd')",
]


@only(lambda case: case.family in DUCKDB_FAMILY)
@pytest.mark.parametrize("sql", ENGINE_REFUSES)
def test_duckdb_engine_guard_holds_without_the_statement_check(
    item: ProvisionedStore, sql: str
) -> None:
    """Read-only mode, locked configuration and no external access refuse these by themselves.

    (Temporary tables, SET VARIABLE and COPY into the item's own folder pass the engine, which
    is why `check_statement` refuses every non-SELECT statement first.)"""
    if item.backend == "iceberg-s3" and sql.endswith("httpfs"):
        sql = sql.replace("httpfs", "spatial")  # httpfs is this store's own, loaded already
    conn = item.engine_connection()  # type: ignore[attr-defined]
    try:
        assert conn.execute("SELECT count(*) FROM orders").fetchall() == [(250,)]
        with pytest.raises(duckdb.Error):
            conn.execute(sql).fetchall()
    finally:
        conn.close()
    assert not Path("/tmp/backintel-evil.duckdb").exists()
    assert not Path("/tmp/backintel-evil.csv").exists()


@only(lambda case: case.spec == "postgres")
def test_postgres_privileges_are_the_guard(store: Store, item: ProvisionedStore) -> None:
    """As the item's role, outside our read-only transaction: writes and DDL still fail."""
    import psycopg

    dsn = store.dsn.rsplit("/", 1)[0].split("//", 1)[1].rsplit("@", 1)[-1]  # type: ignore[attr-defined]
    role = item.role  # type: ignore[attr-defined]
    with psycopg.connect(f"postgresql://{role}@{dsn}/{item.store_id}", autocommit=True) as conn:
        assert conn.execute("SHOW statement_timeout").fetchone() == ("1500ms",)
        conn.execute("SET default_transaction_read_only = off")
        for sql in [
            "INSERT INTO orders (id) VALUES (999)",
            "CREATE TABLE t2 (a integer)",
            "CREATE TEMP TABLE t3 (a integer)",
            "DROP TABLE orders",
        ]:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql)
        assert conn.execute("SELECT count(*) FROM orders").fetchone() == (250,)
    other = store.provision(make_dataset_once(store))
    try:
        with pytest.raises(psycopg.OperationalError, match="permission denied"):
            psycopg.connect(f"postgresql://{role}@{dsn}/{other.store_id}")
    finally:
        other.teardown()


def make_dataset_once(store: Store) -> DatasetFiles:
    root = store.workdir / "tiny"
    if not (root / "parquet").exists():
        return make_dataset(root, "tiny", 3)
    return DatasetFiles("tiny", root / "parquet", root / "dataset.sqlite")


@only(lambda case: case.spec == "postgres")
def test_settings_changed_inside_a_select_do_not_last(item: ProvisionedStore) -> None:
    with item.connect() as session:
        session.run_sql("SELECT set_config('statement_timeout', '0', false) AS s")
        shown = session.run_sql("SELECT current_setting('statement_timeout') AS s")
    assert shown.rows == [("1500ms",)]


@only(lambda case: case.spec in ("files", "files-mixed"))
def test_files_mixed_has_both_formats(item: ProvisionedStore) -> None:
    assert item.mount_path is not None
    suffixes = sorted(p.suffix for p in item.mount_path.iterdir() if p.stem != "_schema")
    expected = [".csv", ".json"] if item.backend == "files-mixed" else [".csv", ".csv"]
    assert suffixes == expected


def test_postgres_session_sweep_drops_leftovers(
    conformance_dataset: DatasetFiles, tmp_path: Path
) -> None:
    """Items never torn down are dropped by `teardown_session`; a dead process's by setup."""
    if os.environ.get("BACKINTEL_PG_DSN") == "initdb":
        pytest.skip("a throwaway cluster is private to its session: nothing is left to sweep")
    import psycopg

    pg = start_store("postgres", tmp_path)
    left = pg.provision(conformance_dataset)
    with psycopg.connect(pg.dsn, autocommit=True) as admin:  # type: ignore[attr-defined]
        admin.execute("DROP DATABASE IF EXISTS bi_00000000dead")
        admin.execute("CREATE DATABASE bi_00000000dead")
        comment = f"backintel:{pg._host}:999999999:feedbeef"  # type: ignore[attr-defined]
        admin.execute(f"COMMENT ON DATABASE bi_00000000dead IS '{comment}'")
        pg.teardown_session()
        start_store("postgres", tmp_path)
        names = {r[0] for r in admin.execute("SELECT datname FROM pg_database").fetchall()}
        roles = {r[0] for r in admin.execute("SELECT rolname FROM pg_roles").fetchall()}
    assert left.store_id not in names
    assert f"{left.store_id}_ro" not in roles
    assert "bi_00000000dead" not in names


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


def whole_seconds(name: str) -> bool:
    """Backends whose timestamps hold whole seconds (`clickhouse-server` on ClickHouse 18.16)."""
    return family(name) == "clickhouse-server"


CH_SLOW = (  # 18.16: one join per SELECT, 244 MiB per query
    "SELECT count(*) AS n FROM (SELECT a.id + b.id AS s FROM orders a CROSS JOIN orders b)"
    " WHERE has(range(20000), toUInt32(s) + 100000)"
)
NO_PROBE = "the evidence stage serves no data probe of a Parquet dataset on this backend"


def case_of(spec: str) -> StoreCase:
    """The shipped store `spec` with its hooks and declared deviations."""
    name = family(spec)
    deviations = list(DEVIATIONS.get(spec, DEVIATIONS.get(name, ())))
    hooks = {"postgres": {"leftover": pg_leftover}, "clickhouse": {"leftover": folder_left}}.get(
        name, {}
    )
    return StoreCase(
        spec,
        deviations=deviations,
        tamper=tamper,
        probe=evidence_probe,
        sweep=sweep,
        fixtures=("clickhouse_server",) if name == "clickhouse-server" else (),
        shown=shown,
        whole_seconds=whole_seconds(spec),
        slow_sql=CH_SLOW if name == "clickhouse-server" else None,
        **hooks,
    )


NO_KILL_HOOK = (
    "no leftover check is written for its items yet (they live {where}); "
    "its sweep is not checked here"
)
DEVIATIONS: dict[str, list[Deviation]] = {
    "iceberg-s3": [
        deviation(
            "test_cleanup_after_sigkill",
            reason=NO_KILL_HOOK.format(where="in an S3 bucket of a local endpoint"),
            raises=NoHook,
            kind="notimpl",
        )
    ],
    "multi": [
        deviation(
            "test_cleanup_after_sigkill",
            reason=NO_KILL_HOOK.format(where="in their component stores, each checked alone"),
            raises=NoHook,
            kind="notimpl",
        )
    ],
}
"""Declared deviations of the shipped stores, by spec or registered name."""
CONFORMANCE_STORES = [case_of(spec) for spec in BACKENDS]
