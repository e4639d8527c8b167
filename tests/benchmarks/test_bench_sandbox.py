"""Cold start of one sandbox execution per backend, against a plain subprocess baseline.

Each round opens a fresh sandbox, runs one exec and closes it (what evidence re-execution
does). The printed ratio is backend time / plain `python -c` subprocess time for the same code.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from pytest_backintel.sandbox import Limits, SandboxProvider
from pytest_backintel.sandbox.registry import create_provider

pytestmark = pytest.mark.benchmark

PRINT_ONE = "print(1)"
POLARS_AGG = (
    "import sqlite3, os, polars as pl\n"
    "con = sqlite3.connect(f\"file:{os.environ['BACKINTEL_STORE']}?mode=ro\", uri=True)\n"
    "df = pl.read_database('SELECT status, amount FROM orders', con)\n"
    "print(df.group_by('status').agg(pl.col('amount').sum()).sort('status').height)\n"
)
ROUNDS = 5


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bench") / "bi_bench.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE orders (id INTEGER, status TEXT, amount REAL)")
        con.executemany(
            "INSERT INTO orders VALUES (?, ?, ?)",
            ((i, ("a", "b", "c")[i % 3], i * 0.5) for i in range(20_000)),
        )
    con.close()
    return path


@pytest.fixture(scope="module", params=["bwrap", "subprocess", "docker"])
def provider(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SandboxProvider]:
    prov = create_provider(request.param, tmp_path_factory.mktemp(request.param), limits=Limits())
    try:
        prov.setup_session()
    except Exception as exc:  # docker: no engine on this machine
        if request.param != "docker":
            raise
        pytest.skip(f"docker backend unavailable: {exc}")
    yield prov
    prov.teardown_session()


def _baseline(code: str, store: Path) -> float:
    """Best of ROUNDS plain `python -c` runs with the same code (no sandbox, no limits)."""
    env = {"BACKINTEL_STORE": str(store), "PATH": "/usr/bin:/bin"}
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, env=env)
        best = min(best, time.perf_counter() - start)
    return best


@pytest.mark.parametrize("code", [PRINT_ONE, POLARS_AGG], ids=["print1", "polars-agg"])
def test_cold_exec(
    benchmark: BenchmarkFixture,
    provider: SandboxProvider,
    store: Path,
    tmp_path: Path,
    code: str,
) -> None:
    def once() -> str:
        with provider.open(store, tmp_path) as sandbox:
            result = sandbox.exec(code)
        assert result.ok, result.stderr
        return result.stdout

    out = benchmark.pedantic(once, rounds=ROUNDS, iterations=1, warmup_rounds=1)  # type: ignore[no-untyped-call]
    assert out.strip() in {"1", "3"}
    baseline = _baseline(code, store)
    if benchmark.stats is None:  # benchmarking is disabled (xdist, --benchmark-disable)
        return
    best = benchmark.stats.stats.min
    benchmark.extra_info["baseline_s"] = baseline
    benchmark.extra_info["ratio_vs_subprocess"] = best / baseline
    print(
        f"\n{provider.name} {'print1' if code == PRINT_ONE else 'polars-agg'}: "
        f"best {best * 1000:.1f} ms vs plain subprocess {baseline * 1000:.1f} ms "
        f"(ratio {best / baseline:.2f})"
    )
