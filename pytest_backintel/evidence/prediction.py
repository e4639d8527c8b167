"""Prediction evidence: the two copies of the store a prediction program runs again on.

- `labels`: the training table's label column permuted between its rows. A program that
  learned from the training cohort loses its edge over the baseline there; one that keeps it
  used something else (hard-coded predictions, a leaked label).
- `features`: every column of the scoring table but the entity shuffled between its rows, each
  column on its own. The features no longer belong to their entities, so a program that predicts
  from them gives other predictions that lose their edge; one whose predictions do not move at
  all, or keep their edge, did not predict from the features (hard-coded by entity).

Both are SQLite copies of the dataset shuffled with the scenario's `permutation_seed`, built
once per dataset. The scorer (`pytest_backintel.scoring.prediction`) turns either re-run
keeping its edge into `unsupported_evidence`.
"""

from __future__ import annotations

import hashlib
import random
import shutil
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pytest_backintel.contract import AnalystAnswer
from pytest_backintel.evidence.predictions_table import prediction_rows
from pytest_backintel.evidence.reexecute import EvidenceResult
from pytest_backintel.scenario import PredictionSpec, Scenario
from stores.common.view_plan import DONE_FILE, build_once

STORE_FILE = "permuted.sqlite"
Check = Literal["labels", "features"]
CHECKS: tuple[Check, ...] = ("labels", "features")
"""The re-runs of a prediction program, in the order they run."""

__all__ = ["CHECKS", "Check", "PermutedRun", "permutation_run", "permuted_copy", "shuffled_copy"]


def _shuffle_column(con: sqlite3.Connection, table: str, column: str, rng: random.Random) -> None:
    rows = con.execute(f'SELECT rowid, "{column}" FROM "{table}" ORDER BY rowid').fetchall()
    values = [r[1] for r in rows]
    rng.shuffle(values)
    con.executemany(
        f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = ?',
        [(value, r[0]) for value, r in zip(values, rows, strict=True)],
    )


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")').fetchall()]


def shuffled_copy(
    sqlite_path: Path, spec: PredictionSpec, cache_dir: Path, check: Check, tag: str = ""
) -> Path:
    """A SQLite copy of `sqlite_path` for one re-run (`labels`: the training labels permuted;
    `features`: each scoring feature column shuffled between rows), seeded with the scenario's
    `permutation_seed`; built once (xdist-safe) per dataset (`tag`, e.g. its data hash)."""
    table = spec.training_table if check == "labels" else spec.scoring_table
    name = f"{tag}|{sqlite_path}|{check}|{table}|{spec.target}|{spec.permutation_seed}"
    final = cache_dir / hashlib.sha256(name.encode()).hexdigest()[:16]

    def build(tmp: Path) -> None:
        target = tmp / STORE_FILE
        shutil.copyfile(sqlite_path, target)
        con = sqlite3.connect(target)
        try:
            rng = random.Random(spec.permutation_seed)
            if check == "labels":
                _shuffle_column(con, table, spec.target, rng)
            else:
                for column in _columns(con, table):
                    if column != spec.entity:
                        _shuffle_column(con, table, column, rng)
            con.commit()
        finally:
            con.close()
        target.chmod(0o444)
        (tmp / DONE_FILE).write_text("ok\n", encoding="utf-8")

    build_once(cache_dir, final, build)
    return final / STORE_FILE


def permuted_copy(sqlite_path: Path, spec: PredictionSpec, cache_dir: Path, tag: str = "") -> Path:
    """`shuffled_copy` with the training labels permuted."""
    return shuffled_copy(sqlite_path, spec, cache_dir, "labels", tag)


@dataclass
class PermutedRun:
    """The cited program re-run on one shuffled copy (`check`)."""

    evidence_id: str
    predictions: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    check: Check = "labels"

    def to_json(self) -> dict[str, Any]:
        return {"evidence": self.evidence_id, "error": self.error, "n": len(self.predictions)}


def permutation_run(
    scenario: Scenario,
    answer: AnalystAnswer,
    evidence: Sequence[EvidenceResult],
    runner: Callable[[str], Mapping[str, Any]] | None,
    check: Check = "labels",
) -> PermutedRun | None:
    """Re-run the first Python evidence that reproduced the predictions on the `check` copy;
    None when there is none (the scorer reports the missing evidence) or no runner."""
    spec = scenario.prediction
    if spec is None or runner is None:
        return None
    name = scenario.metrics[0].name
    cited = {e.id: e for e in answer.evidence}
    for res in evidence:
        if res.kind != "python" or not res.ok or name not in res.reproduced or res.id not in cited:
            continue
        out = PermutedRun(res.id, check=check)
        try:
            printed = runner(res.code)
        except Exception as exc:  # the program's failure there is the analyst's finding
            out.error = f"{type(exc).__name__}: {exc}"[:500]
            return out
        rows, problems = prediction_rows(spec, printed.get(name))
        out.predictions = rows
        if problems:
            out.error = "; ".join(problems[:3])
        return out
    return None
