"""A quick look at a moving probe's check values before it is built (`probe_moves`).

A built world's probes are copies (Parquet, then SQLite): building one per salt tried would
write a copy of the world for every attempt and leave it on disk. Here each attempt's tables are
perturbed in memory (`perturb.perturb_tables`), written to a SQLite file in a temporary folder
exactly as a copy's is (`build_from_parquet`), and the check query runs there; only a salt that
moves the answer is built as a probe, whose own check values then decide.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_backintel.evidence.dialects import translate
from pytest_backintel.evidence.values import EVIDENCE_MAX_ROWS, values_from_result
from pytest_backintel.scenario import Scenario
from stores.base import DatasetFiles, QueryResult

__all__ = ["quick_checks", "quick_possible"]


def quick_possible(files: DatasetFiles, scenario: Scenario) -> bool:
    """Whether `quick_checks` looks at `files` (a world of plain Parquet files, a check query),
    without reading them."""
    if any(k.startswith("parquet:") for k in files.extra) or not scenario.check_sql:
        return False
    return any(files.parquet_dir.glob("*.parquet"))


def quick_checks(
    files: DatasetFiles, scenario: Scenario, moving: tuple[str, ...]
) -> Callable[[int], dict[str, Any]] | None:
    """Per salt, the check values on the moving copy of a Parquet world (None: not a world
    of plain Parquet files, build the probe to know; a manifest beside them is no table)."""
    import polars as pl

    from pytest_backintel.evidence.perturb import perturb_tables
    from stores.engine.sqlite_copy import build_from_parquet

    if not quick_possible(files, scenario) or not scenario.check_sql:
        return None
    paths = sorted(files.parquet_dir.glob("*.parquet"))
    tables = {p.stem: pl.read_parquet(p) for p in paths}
    kinds = {m.name: m.kind for m in scenario.metrics}
    sql = translate(scenario.check_sql, "sqlite")

    def check(salt: int) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="backintel-move-") as tmp:
            folder = Path(tmp)
            for table, df in perturb_tables(tables, salt, moving=moving).items():
                df.write_parquet(folder / f"{table}.parquet", statistics=False)
            build_from_parquet(sorted(folder.glob("*.parquet")), folder / "copy.sqlite")
            con = sqlite3.connect(folder / "copy.sqlite")
            try:
                cur = con.execute(sql)
                columns = [d[0] for d in cur.description]
                rows = cur.fetchmany(EVIDENCE_MAX_ROWS + 1)
            except sqlite3.Error:
                return {}
            finally:
                con.close()
        result = QueryResult(columns, rows[:EVIDENCE_MAX_ROWS], len(rows) > EVIDENCE_MAX_ROWS)
        return values_from_result(result, list(kinds), kinds)[0]

    return check
