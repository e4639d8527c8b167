"""A probe cannot fail a right answer, and its guard never switches off silently: real runs of
a project of your own (a Chinook-like SQLite file, the reference analyst).

- A probe statement past its limit (lowered here by the project's own `conftest.py` to zero,
  as a probe slower than the source by any multiple would be) blocks the trial: `infra_error`,
  naming `--retry-blocked`, never `unsupported_evidence`; `--retry-blocked` at the normal
  limit then passes it.
- A check query that gives nothing on a probe marks the trial unguarded in its record, the
  terminal's lines (the last one counting it), `run.json`, the scorecard and the viewer.
"""

from __future__ import annotations

import json
from pathlib import Path

from test_own_data import backintel, pytest_run
from test_probe_keys import project, truth, write_sqlite

SLOW = """import pytest_backintel.evidence.probe as probe

probe.PROBE_TIME_FLOOR_S = 0.0
probe.PROBE_TIME_MULTIPLE = 0.0
"""
"""A project's conftest that leaves a probe statement no time at all."""


def records(folder: Path, run_id: str) -> list[dict[str, object]]:
    path = folder / "results" / run_id / "records.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_probe_that_cannot_finish_blocks_a_right_answer_and_a_retry_passes_it(
    tmp_path: Path,
) -> None:
    write_sqlite(tmp_path / "chinook.sqlite")
    folder = project(tmp_path, "{sqlite: ../chinook.sqlite}")
    assert backintel(folder, "references", "build").returncode == 0
    (folder / "conftest.py").write_text(SLOW)
    slow = pytest_run(folder, "--run-id", "slow")
    found = records(folder, "slow")
    assert [r["outcome"] for r in found] == ["infra_error"] * 2, slow.stdout[-3000:]
    for record in found:
        reasons = record["reasons"]
        assert isinstance(reasons, list)
        (reason,) = reasons
        assert "did not finish on the perturbed copy" in reason["message"] or (
            "did not finish on perturbed copy" in reason["message"]
        ), reason
        assert "blocked (infra_error), not failed" in reason["message"]
        assert "--retry-blocked" in reason["message"]
    assert "unsupported_evidence" not in slow.stdout
    assert "2 blocked" in slow.stdout

    (folder / "conftest.py").unlink()
    again = pytest_run(folder, "--retry-blocked", "slow")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert [r["outcome"] for r in records(folder, "slow")] == ["pass"] * 2


def test_a_check_query_that_fails_on_a_probe_marks_the_trial_unguarded_everywhere(
    tmp_path: Path,
) -> None:
    write_sqlite(tmp_path / "chinook.sqlite")
    folder = project(tmp_path, "{sqlite: ../chinook.sqlite}")
    value = truth()["usa-invoices"]
    path = folder / "scenarios" / "usa-invoices.scenario.yaml"
    path.write_text(path.read_text().replace("'USA'", f"'USA' HAVING COUNT(*) = {value}"))
    assert backintel(folder, "references", "build").returncode == 0
    run = pytest_run(folder, "--run-id", "u")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    by_case = {r["scenario_id"]: r for r in records(folder, "u")}
    unguarded = by_case["usa-invoices"]
    assert unguarded["outcome"] == "pass"
    why = unguarded["probe_unguarded"]
    assert isinstance(why, str)
    assert "usa_invoices: a scalar metric needs exactly one row" in why
    warnings = unguarded["warnings"]
    assert isinstance(warnings, list)
    assert any(w.startswith("UNGUARDED: ") for w in warnings)
    assert by_case["largest-invoice"]["probe_unguarded"] is None

    lines = [line for line in run.stdout.splitlines() if line.startswith("backintel: ")]
    assert any(line.startswith("backintel: UNGUARDED: 1 trial(s)") for line in lines), lines
    assert lines[-1].endswith("; 1 trial(s) UNGUARDED"), lines[-1]
    summary = json.loads((folder / "results" / "u" / "run.json").read_text())
    assert summary["unguarded_trials"] == 1

    assert backintel(folder, "report", "results/u").returncode == 0
    scorecard = (folder / "results" / "u" / "scorecard.md").read_text()
    assert "UNGUARDED: 1 trial(s) whose evidence was not checked against moved data" in scorecard

    from reports.load import load_run
    from reports.summary import summarize
    from reports.view.data import headline, trial_detail

    loaded = load_run(folder / "results" / "u")
    banners = headline(summarize(loaded))["banners"]
    assert any(b.startswith("UNGUARDED: 1 trial(s)") for b in banners)
    n = next(i for i, r in enumerate(loaded.records) if r["scenario_id"] == "usa-invoices")
    assert any(w.startswith("UNGUARDED: ") for w in trial_detail(n, loaded.records[n])["warnings"])


def test_a_run_whose_probes_check_every_answer_says_nothing_of_unguarded(tmp_path: Path) -> None:
    """The same run with the scenario's own check query: no trial unguarded, no such line."""
    write_sqlite(tmp_path / "chinook.sqlite")
    folder = project(tmp_path, "{sqlite: ../chinook.sqlite}")
    assert backintel(folder, "references", "build").returncode == 0
    run = pytest_run(folder, "--run-id", "g")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert all(r["probe_unguarded"] is None for r in records(folder, "g"))
    assert "UNGUARDED" not in run.stdout
    assert json.loads((folder / "results" / "g" / "run.json").read_text())["unguarded_trials"] == 0
