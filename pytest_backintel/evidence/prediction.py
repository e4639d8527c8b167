"""Prediction evidence: the predictions table read strictly, a re-run compared within the
scenario's declared tolerance, and the training-label permutation the program runs again on.

A program that learned from the training cohort loses its edge over the baseline when the
training labels are permuted; one that keeps it used something else (hard-coded predictions,
a leaked label). The permuted copy is a SQLite copy of the dataset whose training table's
label column is shuffled with the scenario's fixed seed.
"""

from __future__ import annotations

import hashlib
import random
import shutil
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_backintel.contract import AnalystAnswer
from pytest_backintel.evidence.perturb import DONE_FILE, build_once
from pytest_backintel.evidence.predictions_table import prediction_rows
from pytest_backintel.evidence.reexecute import EvidenceResult
from pytest_backintel.scenario import PredictionSpec, Scenario

STORE_FILE = "permuted.sqlite"

__all__ = ["PermutedRun", "permutation_run", "permuted_copy"]


def permuted_copy(sqlite_path: Path, spec: PredictionSpec, cache_dir: Path, tag: str = "") -> Path:
    """A SQLite copy of `sqlite_path` whose training labels are permuted (seeded); built once
    (xdist-safe) per dataset (`tag`, e.g. its data hash), table, label and seed."""
    name = f"{tag}|{sqlite_path}|{spec.training_table}|{spec.target}|{spec.permutation_seed}"
    final = cache_dir / hashlib.sha256(name.encode()).hexdigest()[:16]

    def build(tmp: Path) -> None:
        target = tmp / STORE_FILE
        shutil.copyfile(sqlite_path, target)
        con = sqlite3.connect(target)
        try:
            table, column = spec.training_table, spec.target
            rows = con.execute(f'SELECT rowid, "{column}" FROM "{table}" ORDER BY rowid').fetchall()
            labels = [r[1] for r in rows]
            random.Random(spec.permutation_seed).shuffle(labels)
            con.executemany(
                f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = ?',
                [(label, r[0]) for label, r in zip(labels, rows, strict=True)],
            )
            con.commit()
        finally:
            con.close()
        target.chmod(0o444)
        (tmp / DONE_FILE).write_text("ok\n", encoding="utf-8")

    build_once(cache_dir, final, build)
    return final / STORE_FILE


@dataclass
class PermutedRun:
    """The cited program re-run with the training labels permuted."""

    evidence_id: str
    predictions: dict[str, float] = field(default_factory=dict)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"evidence": self.evidence_id, "error": self.error, "n": len(self.predictions)}


def permutation_run(
    scenario: Scenario,
    answer: AnalystAnswer,
    evidence: Sequence[EvidenceResult],
    runner: Callable[[str], Mapping[str, Any]] | None,
) -> PermutedRun | None:
    """Re-run the first Python evidence that reproduced the predictions on the permuted copy;
    None when there is none (the scorer reports the missing evidence) or no runner."""
    spec = scenario.prediction
    if spec is None or runner is None:
        return None
    name = scenario.metrics[0].name
    cited = {e.id: e for e in answer.evidence}
    for res in evidence:
        if res.kind != "python" or not res.ok or name not in res.reproduced or res.id not in cited:
            continue
        out = PermutedRun(res.id)
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
