"""Cost by the size of a source of your own: sqlite, duckdb, lake-parquet and postgres sources
of about 1 MB and 100 MB (1 GB with `BACKINTEL_BENCH_1GB=1`, 10 GB with `BACKINTEL_BENCH_10GB=1`;
the 1 GB and 10 GB rows need a quiet machine), one scenario, the reference analyst.

For each: the first run with nothing cached (`backintel references build`, then
`pytest --trials 2` on an empty data folder: its wall time and the harness's peak memory),
then the per-trial harness overhead of a warm run of `WARM` trials: the median trial as pytest
times it (setup, call and teardown; the process's first trial aside) minus the median
analyst time (`latency_s` in the records), with its ratio to the 1 MB row.
The scenario's query is a key-range count, cheap at every size, so what grows with the data is
the harness's own work (copies, hashes, probes), not the query. Printed, never asserted.
Select it with `-k size`:

    BACKINTEL_BENCHMARKS=1 uv run pytest tests/benchmarks -k size -p no:xdist -s
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.benchmark

BIN = Path(sys.executable).parent
ADMIN_DSN = os.environ.get("BACKINTEL_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
ROW_BYTES = 60
"""About what one Invoice row costs on disk in SQLite (16 k rows ~ 1 MB)."""
WARM = 12
BACKENDS = ("sqlite", "duckdb", "lake-parquet", "postgres")
SQL = "SELECT COUNT(*) AS n FROM Invoice WHERE InvoiceId BETWEEN 1000 AND 1999 AND Total > 5"
SCENARIO = """id: size-probe
version: 1
title: Invoices in a key range
question: How many invoices with ids 1000 to 1999 have a total above 5?
dataset: {binding}
split: development
level: 1
family: invoices
answerable: true
metrics:
  - {{name: n, kind: count, unit: invoices}}
reference:
  sql: {sql}
"""


def sizes_mb() -> list[int]:
    sizes = [1, 100]
    if os.environ.get("BACKINTEL_BENCH_1GB"):
        sizes.append(1000)
    if os.environ.get("BACKINTEL_BENCH_10GB"):
        sizes.append(10_000)
    return sizes


def _sqlite(path: Path, rows: int) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE Customer (CustomerId INTEGER PRIMARY KEY, Country TEXT NOT NULL)")
    con.execute(
        "CREATE TABLE Invoice (InvoiceId INTEGER PRIMARY KEY, CustomerId INTEGER NOT NULL "
        "REFERENCES Customer (CustomerId), BillingCountry TEXT NOT NULL, "
        "BillingAddress TEXT NOT NULL, Total DECIMAL(10,2) NOT NULL)"
    )
    con.execute(
        "INSERT INTO Customer WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
        "WHERE i < 1000) SELECT i, 'C' || (i % 24) FROM n"
    )
    con.execute(
        "INSERT INTO Invoice WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
        f"WHERE i < {rows}) SELECT i, 1 + i * 7 % 1000, 'C' || (i % 24), "
        "printf('%d Some Street, Some Town %05d', i % 997, i % 99991), "
        "((i * 3779) % 2500 + 99) / 100.0 FROM n"
    )
    con.commit()
    con.close()


def make_source(kind: str, folder: Path, rows: int) -> tuple[str, dict[str, str], Any]:
    """The source in `kind` form under `folder`: (binding, environment, cleanup)."""
    _sqlite(folder / "src.sqlite", rows)
    if kind == "sqlite":
        return "{sqlite: ../src.sqlite}", {}, None
    import duckdb

    con = duckdb.connect()
    lite = sqlite3.connect(folder / "src.sqlite")
    tables: dict[str, Any] = {}
    for table in ("Customer", "Invoice"):
        cur = lite.execute(f"SELECT * FROM {table}")
        cols = [d[0] for d in cur.description]
        import pyarrow as pa

        batches = []
        while chunk := cur.fetchmany(200_000):
            rows_ = [dict(zip(cols, r, strict=True)) for r in chunk]
            batches.append(pa.RecordBatch.from_pylist(rows_))
        tables[table] = pa.Table.from_batches(batches)
    lite.close()
    money = "CAST(Total AS DECIMAL(10,2)) AS Total"
    if kind == "lake-parquet":
        (folder / "lake").mkdir()
        for table, data in tables.items():
            con.register("t", data)
            select = f"* REPLACE ({money})" if table == "Invoice" else "*"
            con.execute(f"COPY (SELECT {select} FROM t) TO '{folder}/lake/{table}.parquet'")
            con.unregister("t")
        con.close()
        return "{parquet: ../lake}", {}, None
    if kind == "duckdb":
        db = duckdb.connect(str(folder / "src.duckdb"))
        db.execute("CREATE TABLE Customer (CustomerId BIGINT PRIMARY KEY, Country VARCHAR)")
        db.execute(
            "CREATE TABLE Invoice (InvoiceId BIGINT PRIMARY KEY, CustomerId BIGINT REFERENCES "
            "Customer (CustomerId), BillingCountry VARCHAR, BillingAddress VARCHAR, "
            "Total DECIMAL(10,2))"
        )
        for table, data in tables.items():
            db.register("t", data)
            db.execute(f"INSERT INTO {table} SELECT * FROM t")
            db.unregister("t")
        db.close()
        con.close()
        return "{duckdb: ../src.duckdb}", {}, None
    con.close()
    import psycopg

    name = f"bench_size_{secrets.token_hex(4)}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    dsn = ADMIN_DSN.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(dsn, autocommit=True) as pg:
        pg.execute("CREATE TABLE Customer (CustomerId integer PRIMARY KEY, Country text)")
        pg.execute(
            "CREATE TABLE Invoice (InvoiceId integer PRIMARY KEY, CustomerId integer "
            "REFERENCES Customer (CustomerId), BillingCountry text, BillingAddress text, "
            "Total numeric(10,2))"
        )
        for table, data in tables.items():
            with pg.cursor().copy(f"COPY {table} FROM STDIN") as copy:
                for row in data.to_pylist():
                    copy.write_row(list(row.values()))

    def drop() -> None:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return "{postgres: BENCH_DSN}", {"BENCH_DSN": dsn}, drop


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS in MB of the process (and of the children it waited for), and
    its output."""
    log = cwd / f".out-{secrets.token_hex(3)}"
    started = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    text = log.read_text()
    if code not in (0, 1):
        raise AssertionError(f"{argv} exited {code}:\n{text[-3000:]}")
    return wall, usage.ru_maxrss / 1024, text


def overhead(folder: Path, run_id: str, junit: Path) -> tuple[float, float]:
    """The median trial (pytest's setup + call + teardown, the process's first trial aside)
    and the median analyst time of the run's records."""
    import statistics
    import xml.etree.ElementTree as ET

    lines = (folder / "results" / run_id / "records.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    outcomes = {r["outcome"] for r in records}
    assert outcomes == {"pass"}, outcomes
    cases = [float(c.get("time", "0")) for c in ET.parse(junit).iter("testcase")]
    trial = statistics.median(cases[1:] or cases)
    return trial, statistics.median(r["latency_s"] for r in records)


def measure(kind: str, size_mb: int, tmp: Path) -> dict[str, float]:
    folder = tmp / f"{kind}-{size_mb}"
    (folder / "scenarios").mkdir(parents=True)
    (folder / "pyproject.toml").write_text('[tool.pytest.ini_options]\npythonpath = ["."]\n')
    rows = size_mb * 1_000_000 // ROW_BYTES
    binding, extra, cleanup = make_source(kind, folder, rows)
    scenario = SCENARIO.format(binding=binding, sql=SQL)
    (folder / "scenarios" / "size.scenario.yaml").write_text(scenario)
    env = {**os.environ, **extra, "BACKINTEL_DATA_DIR": str(folder / "data")}
    env.pop("BACKINTEL_BENCHMARKS", None)
    pytest_argv = [str(BIN / "pytest"), "scenarios", "-p", "no:xdist", "--concurrency", "1"]
    try:
        build, build_peak, out = timed([str(BIN / "backintel"), "references", "build"], folder, env)
        assert "error" not in out.lower(), out
        first, first_peak, _ = timed([*pytest_argv, "--trials", "2", "--run-id", "f"], folder, env)
        junit = folder / "warm.xml"
        warm_argv = [*pytest_argv, "--trials", str(WARM), "--run-id", "w", f"--junitxml={junit}"]
        _, warm_peak, _ = timed(warm_argv, folder, env)
        per_trial, analyst = overhead(folder, "w", junit)
    finally:
        if cleanup is not None:
            cleanup()
    return {
        "source_mb": sum(p.stat().st_size for p in folder.rglob("src*") if p.is_file()) / 1e6
        if kind != "lake-parquet"
        else sum(p.stat().st_size for p in (folder / "lake").iterdir()) / 1e6,
        "build_s": build,
        "build_peak_mb": build_peak,
        "first_run_s": first,
        "first_peak_mb": first_peak,
        "warm_peak_mb": warm_peak,
        "per_trial_s": per_trial,
        "overhead_s": max(per_trial - analyst, 0.0),
    }


def test_size_table(tmp_path: Path) -> None:
    backends = os.environ.get("BACKINTEL_BENCH_BACKENDS", ",".join(BACKENDS)).split(",")
    rows: list[tuple[str, int, dict[str, float]]] = []
    for kind in backends:
        for size in sizes_mb():
            rows.append((kind, size, measure(kind, size, tmp_path)))
            print(f"measured {kind} {size} MB: {rows[-1][2]}", flush=True)  # long runs
    base = {kind: m["overhead_s"] for kind, size, m in rows if size == 1}
    print()
    print(
        "| backend | size | references build (peak) | first run, 2 trials (peak) "
        "| per-trial harness overhead | ratio to 1 MB |"
    )
    print("|---|---|---|---|---|---|")
    for kind, _, m in rows:
        ratio = m["overhead_s"] / base[kind] if base.get(kind) else float("nan")
        print(
            f"| {kind} | {m['source_mb']:.1f} MB | {m['build_s']:.1f} s "
            f"({m['build_peak_mb']:.0f} MB) | {m['first_run_s']:.1f} s "
            f"({m['first_peak_mb']:.0f} MB) | {m['overhead_s'] * 1000:.0f} ms | {ratio:.2f}x |"
        )
