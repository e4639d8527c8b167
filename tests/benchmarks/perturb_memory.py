"""Peak memory of one perturbed copy of a built world: every table in memory at once
(`perturb.perturb_tables` over the folder read whole, the path before) against the copy written
a batch of rows at a time (`perturb_stream.perturb_parquet`, the path `perturb_dataset` takes).

Each is run in its own process, one after the other, and prints its wall and CPU seconds and
its peak resident memory (`ru_maxrss`); then the two copies are compared table by table (the
same rows in the same order, or the script fails) and the ratio of the peaks printed.

    uv run python tests/benchmarks/perturb_memory.py [--world tpch] [--snapshot sf1] [--salt 1]

The world is built under `data/` (or `--data DIR`) first if it is not there (TPC-H SF1: about a
minute). `tests/test_perturb_stream.py` runs the script on TPC-H SF0.01.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _one(way: str, src: Path, dst: Path, salt: int) -> None:
    """Run in the child: one copy of `src` into `dst`, then print its figures as JSON."""
    import polars as pl

    started, cpu = time.monotonic(), time.process_time()
    if way == "memory":
        from pytest_backintel.evidence.perturb import perturb_tables

        tables = {p.stem: pl.read_parquet(p) for p in sorted(src.glob("*.parquet"))}
        dst.mkdir(parents=True)
        for table, df in perturb_tables(tables, salt).items():
            df.write_parquet(dst / f"{table}.parquet", statistics=False)
    else:
        from pytest_backintel.evidence.perturb_stream import perturb_parquet

        perturb_parquet(src, dst, salt)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    wall, cpu = time.monotonic() - started, time.process_time() - cpu
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "peak_mb": peak_mb}))


def _same(a: Path, b: Path) -> list[str]:
    """The tables whose rows differ between the two copies."""
    import polars as pl

    return [
        p.name
        for p in sorted(a.glob("*.parquet"))
        if not pl.read_parquet(p).equals(pl.read_parquet(b / p.name))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", default="tpch")
    parser.add_argument("--snapshot", default="sf1")
    parser.add_argument("--salt", type=int, default=1)
    parser.add_argument("--data", type=Path, default=REPO / "data")
    parser.add_argument("--child", nargs=3, metavar=("WAY", "SRC", "DST"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        way, src, dst = args.child
        _one(way, Path(src), Path(dst), args.salt)
        return
    from pytest_backintel.collect.worlds import get_world

    files = get_world(args.world).ensure_built(args.data, args.snapshot)
    out = Path(tempfile.mkdtemp(prefix="backintel-perturb-memory-"))
    figures = {}
    for way in ("memory", "stream"):
        cmd = [sys.executable, __file__, "--salt", str(args.salt), "--child", way]
        cmd += [str(files.parquet_dir), str(out / way)]
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True)
        figures[way] = json.loads(done.stdout.strip().splitlines()[-1])
        wall, cpu, peak = (figures[way][k] for k in ("wall_s", "cpu_s", "peak_mb"))
        print(f"{way:7} wall {wall:5.1f} s, cpu {cpu:5.1f} s, peak {peak:5.0f} MB")
    differ = _same(out / "memory", out / "stream")
    if differ:
        sys.exit(f"the copies differ in {', '.join(differ)}")
    ratio = figures["stream"]["peak_mb"] / figures["memory"]["peak_mb"]
    print(f"same rows in every table; peak memory ratio (stream / memory): {ratio:.2f}")


if __name__ == "__main__":
    main()
