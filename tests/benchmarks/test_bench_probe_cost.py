"""What a data probe costs against the query itself, by the size of a source of your own:
sqlite, duckdb, lake-parquet and postgres sources of about 1 MB, 100 MB and 1 GB
(`BACKINTEL_BENCH_SIZES=1,100` picks sizes in MB, `BACKINTEL_BENCH_BACKENDS=sqlite` backends),
one scenario whose query reads every row (a filtered count, as an analyst's query does), run
by the reference analyst and by a literal cheater (the right number, cited by
`SELECT <number> AS n FROM Invoice LIMIT 1`).

Printed per backend and size: the bare query's time on the source (this process, the engine's
own client, median of 3; DuckDB on one thread, as the harness's sessions run), a warm trial's
time (pytest's, median, the process's first trial aside), their ratio, the probe queries'
time (the evidence on each perturbed copy, from the records: median and largest), the run's
peak memory, the reference analyst's trials that did not pass (false fails), unguarded
trials, and the cheater's trials caught. Printed, never asserted; run it on a quiet machine
(the load average is printed too):

    BACKINTEL_BENCHMARKS=1 uv run pytest tests/benchmarks -k probe_cost -p no:xdist -s

`BACKINTEL_BENCH_SOURCES=<folder>` keeps each generated source there (`<backend>-<size>`, a
PostgreSQL source as the database `bench_probe_cost_<size>`, kept) and reuses it on the next
run: a 1 GB source takes minutes to build. Delete the folder (and drop those databases) to
build them again.
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from test_bench_size import ADMIN_DSN, BIN, ROW_BYTES, make_source, sizes_mb, timed

pytestmark = pytest.mark.benchmark

BACKENDS = ("sqlite", "duckdb", "lake-parquet", "postgres")
TRIALS = 6
SQL = "SELECT COUNT(*) AS n FROM Invoice WHERE BillingCountry = 'C3' AND Total > 5"
SCENARIO = """id: scan-probe
version: 1
title: Invoices billed to C3 above 5
question: How many invoices billed to C3 have a total above 5?
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
CHEAT = '''
from pytest_backintel.analyst_api import AnalystRun
from pytest_backintel.contract import AnalystAnswer, Evidence, MetricValue

SQL = {sql!r}


class Literal:
    """Runs the right query, then cites its number as a literal over a real table."""

    name, kind = "literal", "custom"

    def answer(self, task):
        with task.connect() as session:
            value = session.run_sql(SQL).rows[0][0]
        code = f"SELECT {{value}} AS n FROM Invoice LIMIT 1"
        return AnalystRun(
            AnalystAnswer(
                metrics=[MetricValue(name="n", value=value, unit="invoices")],
                evidence=[Evidence(id="e1", kind="sql", code=code, metrics=["n"])],
            )
        )


def literal(config):
    return Literal()
'''


def bare_query_s(kind: str, folder: Path, env: dict[str, str]) -> float:
    """The scenario's query on the source with the engine's own client (median of 3)."""
    times = []
    for _ in range(3):
        started = time.perf_counter()
        if kind == "sqlite":
            con = sqlite3.connect(folder / "src.sqlite")
            con.execute(SQL).fetchall()
            con.close()
        elif kind == "postgres":
            import psycopg

            with psycopg.connect(env["BENCH_DSN"]) as pg:
                pg.execute(SQL).fetchall()
        else:
            import duckdb

            one = {"threads": 1}  # as the harness's sessions, on the source and the probes
            if kind == "duckdb":
                con = duckdb.connect(str(folder / "src.duckdb"), read_only=True, config=one)
                con.execute(SQL).fetchall()
            else:
                con = duckdb.connect(config=one)
                con.execute(
                    f"SELECT COUNT(*) FROM '{folder}/lake/Invoice.parquet' "
                    "WHERE BillingCountry = 'C3' AND Total > 5"
                ).fetchall()
            con.close()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _records(folder: Path, run_id: str) -> list[dict[str, Any]]:
    lines = (folder / "results" / run_id / "records.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def unguarded(record: dict[str, Any]) -> bool:
    """Marked so (`probe_unguarded`), or, by a harness from before that field, named among
    the probe's gaps."""
    gaps = record.get("probe_gaps") or []
    return bool(record.get("probe_unguarded")) or any(
        str(g).startswith("evidence is not checked") for g in gaps
    )


def source(kind: str, folder: Path, size_mb: int) -> tuple[str, dict[str, str], Any, Path]:
    """`make_source`'s (binding, environment, cleanup) and the folder the source is in, built
    once under `BACKINTEL_BENCH_SOURCES` when it is set (then kept: no cleanup)."""
    rows = size_mb * 1_000_000 // ROW_BYTES
    kept = os.environ.get("BACKINTEL_BENCH_SOURCES")
    if not kept:
        return (*make_source(kind, folder, rows), folder)
    where = Path(kept).resolve() / f"{kind}-{size_mb}"
    done = where / "binding.json"
    if not done.is_file():
        where.mkdir(parents=True, exist_ok=True)
        if kind == "postgres":
            binding, extra = _kept_postgres(size_mb, rows)
        else:
            binding, extra, _ = make_source(kind, where, rows)
            binding = binding.replace("../", f"{where}/")
        done.write_text(json.dumps([binding, extra]))
    binding, extra = json.loads(done.read_text())
    return binding, extra, None, where


def _kept_postgres(size_mb: int, rows: int) -> tuple[str, dict[str, str]]:
    """A PostgreSQL source kept as the database `bench_probe_cost_<size>`."""
    import psycopg

    name = f"bench_probe_cost_{size_mb}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _, extra, _ = make_source("postgres", Path("."), rows)
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        built = extra["BENCH_DSN"].rsplit("/", 1)[1]
        admin.execute(f'ALTER DATABASE "{built}" RENAME TO "{name}"')
    return "{postgres: BENCH_DSN}", {"BENCH_DSN": ADMIN_DSN.rsplit("/", 1)[0] + f"/{name}"}


def measure(kind: str, size_mb: int, tmp: Path) -> dict[str, float]:
    folder = tmp / f"{kind}-{size_mb}"
    (folder / "scenarios").mkdir(parents=True)
    (folder / "pyproject.toml").write_text('[tool.pytest.ini_options]\npythonpath = ["."]\n')
    (folder / "cheat.py").write_text(CHEAT.format(sql=SQL))
    binding, extra, cleanup, home = source(kind, folder, size_mb)
    (folder / "scenarios" / "scan.scenario.yaml").write_text(
        SCENARIO.format(binding=binding, sql=SQL)
    )
    (folder / "tmp").mkdir()
    env = {
        **os.environ,
        **extra,
        "BACKINTEL_DATA_DIR": str(folder / "data"),
        "TMPDIR": str(folder / "tmp"),
    }
    env.pop("BACKINTEL_BENCHMARKS", None)
    argv = [str(BIN / "pytest"), "scenarios", "-p", "no:xdist", "--concurrency", "1"]
    try:
        bare = bare_query_s(kind, home, env)
        _, _, out = timed([str(BIN / "backintel"), "references", "build"], folder, env)
        assert "error" not in out.lower(), out
        junit = folder / "ref.xml"
        run = [*argv, "--trials", str(TRIALS), "--run-id", "ref", f"--junitxml={junit}"]
        _, peak, _ = timed(run, folder, env)
        cheat = [*argv, "--trials", str(TRIALS), "--run-id", "cheat", "--analyst", "cheat:literal"]
        _, cheat_peak, _ = timed(cheat, folder, env)
    finally:
        if cleanup is not None:
            cleanup()
    cases = [float(c.get("time", "0")) for c in ET.parse(junit).iter("testcase")]
    ref = _records(folder, "ref")
    probe_s = [
        float(p["seconds"])
        for r in ref
        for e in r.get("evidence") or []
        for p in e.get("probes") or []
        if "seconds" in p
    ]
    trial = statistics.median(cases[1:] or cases)
    return {
        "bare_s": bare,
        "trial_s": trial,
        "ratio": trial / bare if bare else float("nan"),
        "probe_median_s": statistics.median(probe_s) if probe_s else float("nan"),
        "probe_max_s": max(probe_s, default=float("nan")),
        "peak_mb": max(peak, cheat_peak),
        "false_fails": sum(1 for r in ref if r["outcome"] != "pass"),
        "unguarded": sum(1 for r in ref if unguarded(r)),
        "caught": sum(1 for r in _records(folder, "cheat") if r["outcome"] != "pass"),
        "trials": TRIALS,
        "load": os.getloadavg()[0],
    }


def test_probe_cost_table(tmp_path: Path) -> None:
    backends = os.environ.get("BACKINTEL_BENCH_BACKENDS", ",".join(BACKENDS)).split(",")
    rows = []
    for kind in backends:
        for size in sizes_mb():
            rows.append((kind, size, measure(kind, size, tmp_path)))
            print(f"measured {kind} {size} MB: {rows[-1][2]}", flush=True)
    print()
    print(
        "| backend | size | bare query | trial | trial / bare | probe query (median, max) "
        "| probe / bare (max) | peak memory | false fails | unguarded | cheater caught "
        "| load average |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for kind, size, m in rows:
        print(
            f"| {kind} | {size} MB | {m['bare_s']:.3f} s | {m['trial_s']:.3f} s "
            f"| {m['ratio']:.1f}x | {m['probe_median_s']:.3f} s, {m['probe_max_s']:.3f} s "
            f"| {m['probe_max_s'] / m['bare_s']:.1f}x | {m['peak_mb']:.0f} MB "
            f"| {m['false_fails']}/{m['trials']} | {m['unguarded']}/{m['trials']} "
            f"| {m['caught']}/{m['trials']} | {m['load']:.1f} |"
        )
