"""Cost by the size of a ClickHouse source of your own (`dataset: {clickhouse: DSN}`), on the
`clickhouse_server` fixture's server (Debian's 18.16 in a temp folder): the same scenario,
rows and measurements as `test_bench_size.py` (first run with nothing cached, then the
per-trial harness overhead of a warm run with its ratio to the smallest source; and the
store's own part of a trial in process). Sizes are in rows, as the other backends' "1 MB",
"100 MB" and "1 GB" (`BACKINTEL_BENCH_SIZES` in MB picks them); ClickHouse stores them
compressed, and each row shows the source's size on disk. Printed, never asserted:

    BACKINTEL_BENCHMARKS=1 uv run pytest tests/benchmarks -k clickhouse_source -p no:xdist -s
"""

from __future__ import annotations

import os
import secrets
import statistics
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from test_bench_size import BIN, ROW_BYTES, SCENARIO, SQL, WARM, overhead, sizes_mb, timed

from stores.clickhouse.http import HttpClient

pytestmark = pytest.mark.benchmark
STORE_ITEMS = 10


def make_source(env: dict[str, str], rows: int) -> tuple[str, str, HttpClient, str]:
    """A database of `rows` invoices on the fixture's server: (binding, DSN, admin, db)."""
    if not env.get("BACKINTEL_CLICKHOUSE_DSN"):
        pytest.skip("no clickhouse-server to start here")
    admin = HttpClient(env["BACKINTEL_CLICKHOUSE_DSN"])
    db = f"bench_size_{secrets.token_hex(4)}"
    admin.post(f"CREATE DATABASE {db}")
    admin.post(
        f"CREATE TABLE {db}.Customer (CustomerId Int32, Country String) "
        "ENGINE = MergeTree ORDER BY CustomerId"
    )
    admin.post(
        f"CREATE TABLE {db}.Invoice (InvoiceId Int64, CustomerId Int32, BillingCountry String, "
        "BillingAddress String, Total Decimal(10, 2)) ENGINE = MergeTree ORDER BY InvoiceId"
    )
    admin.post(
        f"INSERT INTO {db}.Customer SELECT toInt32(number + 1), concat('C', "
        "toString((number + 1) % 24)) FROM system.numbers LIMIT 1000"
    )
    admin.post(
        f"INSERT INTO {db}.Invoice SELECT i, toInt32(1 + i * 7 % 1000), concat('C', "
        "toString(i % 24)), concat(toString(i % 997), ' Some Street, Some Town ', "
        "substring(concat('00000', toString(i % 99991)), length(toString(i % 99991)) + 1, 5)), "
        "toDecimal64(((i * 3779) % 2500 + 99), 2) / 100 "
        f"FROM (SELECT toInt64(number + 1) AS i FROM system.numbers LIMIT {rows})",
        timeout_s=3600,
    )
    for table in ("Customer", "Invoice"):  # a source at rest: no merge left to compete
        admin.post(f"OPTIMIZE TABLE {db}.{table} FINAL", timeout_s=3600)
    netloc = urlsplit(env["BACKINTEL_CLICKHOUSE_DSN"]).netloc
    return "{clickhouse: BENCH_CH}", f"clickhouse://{netloc}/{db}", admin, db


def on_disk_mb(admin: HttpClient, db: str) -> float:
    found = admin.query(
        f"SELECT sum(bytes_on_disk) FROM system.parts WHERE database = '{db}' AND active"
    )
    return float(found.rows[0][0]) / 1e6


def measure(env: dict[str, str], size_mb: int, tmp: Path) -> dict[str, float]:
    folder = tmp / f"clickhouse-{size_mb}"
    (folder / "scenarios").mkdir(parents=True)
    (folder / "pyproject.toml").write_text('[tool.pytest.ini_options]\npythonpath = ["."]\n')
    binding, dsn, admin, db = make_source(env, size_mb * 1_000_000 // ROW_BYTES)
    (folder / "scenarios" / "size.scenario.yaml").write_text(
        SCENARIO.format(binding=binding, sql=SQL)
    )
    (folder / "tmp").mkdir()
    run_env = {
        **os.environ,
        "BENCH_CH": dsn,
        "BACKINTEL_DATA_DIR": str(folder / "data"),
        "TMPDIR": str(folder / "tmp"),
    }
    run_env.pop("BACKINTEL_BENCHMARKS", None)
    pytest_argv = [str(BIN / "pytest"), "scenarios", "-p", "no:xdist", "--concurrency", "1"]
    try:
        build, build_peak, out = timed(
            [str(BIN / "backintel"), "references", "build"], folder, run_env
        )
        assert "error" not in out.lower(), out
        first, first_peak, _ = timed(
            [*pytest_argv, "--trials", "2", "--run-id", "f"], folder, run_env
        )
        junit = folder / "warm.xml"
        warm = [*pytest_argv, "--trials", str(WARM), "--run-id", "w", f"--junitxml={junit}"]
        timed(warm, folder, run_env)
        per_trial, analyst = overhead(folder, "w", junit)
        store = store_cost(dsn, folder / "store")
        size = on_disk_mb(admin, db)
    finally:
        admin.post(f"DROP DATABASE IF EXISTS {db}")
    return {
        "source_mb": size,
        "build_s": build,
        "build_peak_mb": build_peak,
        "first_run_s": first,
        "first_peak_mb": first_peak,
        "overhead_s": max(per_trial - analyst, 0.0),
        "load": os.getloadavg()[0],
        **store,
    }


def store_cost(dsn: str, workdir: Path) -> dict[str, float]:
    """Provision an item, fingerprint it before and after, tear it down, in process (median
    of `STORE_ITEMS`, the first item aside: it hashes the source)."""
    from stores.base import DatasetFiles
    from stores.clickhouse.source import ClickHouseSourceStore

    store = ClickHouseSourceStore(workdir, dsn)
    store.setup_session()
    files = DatasetFiles("bench", parquet_dir=workdir / "none")
    times = []
    try:
        for _ in range(STORE_ITEMS + 1):
            started = time.perf_counter()
            item = store.provision(files)
            item.fingerprint()
            item.fingerprint()
            item.teardown()
            times.append(time.perf_counter() - started)
    finally:
        store.teardown_session()
    return {"store_first_s": times[0], "store_item_s": statistics.median(times[1:])}


def test_clickhouse_source_cost(tmp_path: Path, clickhouse_server: dict[str, str]) -> None:
    rows: list[tuple[int, dict[str, Any]]] = []
    for size in sizes_mb():
        rows.append((size, measure(clickhouse_server, size, tmp_path)))
        print(f"measured clickhouse {size} MB of rows: {rows[-1][1]}", flush=True)
    base = rows[0][1]
    print(
        "\n| source rows | on disk | references build (peak) | first run, 2 trials (peak) "
        "| per-trial harness overhead | ratio | store: first item | store: each later item "
        "| ratio | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for size, m in rows:
        print(
            f"| {size * 1_000_000 // ROW_BYTES} | {m['source_mb']:.1f} MB | {m['build_s']:.1f} s "
            f"({m['build_peak_mb']:.0f} MB) | {m['first_run_s']:.1f} s "
            f"({m['first_peak_mb']:.0f} MB) | {m['overhead_s'] * 1000:.0f} ms "
            f"| {m['overhead_s'] / base['overhead_s']:.2f}x | {m['store_first_s'] * 1000:.0f} ms "
            f"| {m['store_item_s'] * 1000:.1f} ms "
            f"| {m['store_item_s'] / base['store_item_s']:.2f}x | {m['load']:.1f} |",
            flush=True,
        )
