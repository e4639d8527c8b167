"""`backintel compare` never accepts a candidate with a planned trial that left no record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reports import compare_runs, load_run
from reports.cli import main
from reports.compare import ComparisonRefused
from reports.testing import header, record, write_run

CASES = ["delivered_orders", "repeat_person_share"]


def run(root: Path, run_id: str, trials: dict[str, list[int]], **head: Any) -> Path:
    records = [record(c, "pass", trial=t, run_id=run_id) for c, ts in trials.items() for t in ts]
    return write_run(root / run_id, header(run_id, trials=3) | head, records)


def full(root: Path, run_id: str) -> Path:
    return run(root, run_id, {c: [1, 2, 3] for c in CASES})


def test_complete_runs_compare(tmp_path: Path) -> None:
    assert compare_runs(load_run(full(tmp_path, "a")), load_run(full(tmp_path, "b"))).accepted


def test_a_trial_missing_in_the_middle_is_named(tmp_path: Path, capsys: Any) -> None:
    gap = run(tmp_path, "gap", {"delivered_orders": [1, 3], "repeat_person_share": [1, 2, 3]})
    with pytest.raises(ComparisonRefused, match=r"candidate run gap .*delivered_orders trial 2"):
        compare_runs(load_run(full(tmp_path, "base")), load_run(gap))
    assert main(["compare", str(tmp_path / "base"), str(gap)]) != 0
    assert "delivered_orders trial 2" in capsys.readouterr().err


def test_a_planned_item_without_record_is_named(tmp_path: Path) -> None:
    """The last trial of a case crashed: only the plan knows it was meant to run."""
    nodeid = record("delivered_orders", trial=3)["nodeid"]
    planned = [record(c, trial=t)["nodeid"] for c in CASES for t in (1, 2, 3)]
    cut = run(tmp_path, "cut", {"delivered_orders": [1, 2], "repeat_person_share": [1, 2, 3]},
              planned_items=planned)  # fmt: skip
    with pytest.raises(ComparisonRefused, match=rf"{nodeid.replace('[', '.').replace(']', '.')}"):
        compare_runs(load_run(full(tmp_path, "base")), load_run(cut))
    both = run(tmp_path, "both", {c: [1, 2, 3] for c in CASES}, planned_items=planned)
    assert compare_runs(load_run(full(tmp_path, "base")), load_run(both)).accepted


def test_the_frozen_plan_counts_too(tmp_path: Path) -> None:
    cut = run(tmp_path, "frozen", {"delivered_orders": [1, 2], "repeat_person_share": [1, 2, 3]})
    lock = {"plan_items": [record(c, trial=t)["nodeid"] for c in CASES for t in (1, 2, 3)]}
    (cut / "freeze.lock.json").write_text(json.dumps(lock))
    with pytest.raises(ComparisonRefused, match="1 planned trial"):
        compare_runs(load_run(full(tmp_path, "base")), load_run(cut))
