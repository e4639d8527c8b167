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

import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from datetime import date, datetime
from decimal import Decimal
from multiprocessing import get_context
from pathlib import Path

import duckdb
import pytest
from store_hooks import (
    ch_server_leftover,
    evidence_probe,
    folder_left,
    pg_leftover,
    shown,
    sweep,
    tamper,
)

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
    seconds = request.getfixturevalue("conformance_seconds_datasets")[0]
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


@only(lambda case: case.spec == "postgres")
def test_postgres_reads_the_rows_of_an_unchanged_item_once(
    store: Store, item: ProvisionedStore
) -> None:
    """The fingerprint after a trial reads no row when no row version changed; a write behind
    the store (even of the same value) makes new ones, and the rows are read again."""
    import psycopg

    from stores.common.logical_cache import LogicalCache

    computed: list[str] = []

    class Counting(LogicalCache):
        def get(self, physical: str, compute: Callable[[], str]) -> str:
            return super().get(physical, lambda: computed.append(physical) or compute())

    store.logical = Counting()  # type: ignore[attr-defined]
    before = item.fingerprint()
    assert item.fingerprint() == before
    assert len(computed) == 1
    with psycopg.connect(item.admin_dsn, autocommit=True) as conn:  # type: ignore[attr-defined]
        conn.execute("UPDATE orders SET id = id WHERE id = (SELECT min(id) FROM orders)")
    after = item.fingerprint()
    assert after.physical != before.physical
    assert after.logical == before.logical
    assert len(computed) == 2


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
    hooks = {
        "postgres": {"leftover": pg_leftover},
        "clickhouse": {"leftover": folder_left},
        "clickhouse-server": {"leftover": ch_server_leftover},
    }.get(name, {})
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
    "clickhouse-server": [
        deviation(
            "test_cleanup_after_sigkill",
            reason="a killed run's per-item databases on the server are recorded nowhere, so "
            "neither the next session nor `backintel clean` drops them (the ClickHouse source "
            "store records its own: stores/clickhouse/dsn.py)",
            raises=AssertionError,
            kind="notimpl",
        )
    ],
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
