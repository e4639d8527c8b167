"""docs/scenarios.md, "Prediction scenarios over your own data", executed: its files are written
into an empty folder and its commands run there as a user runs them; then the labels file is
spoiled in two ways the build must refuse, naming the scenario file's line."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "scenarios.md"
SECTION = "## Prediction scenarios over your own data"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
BIN = Path(sys.executable).parent


def example() -> tuple[dict[str, str], list[str]]:
    """The section's files (`file=PATH` blocks) and commands (`console` blocks)."""
    text = DOC.read_text(encoding="utf-8").split(SECTION, 1)[1].split("\n## ", 1)[0]
    files: dict[str, str] = {}
    commands: list[str] = []
    for lang, info, body in FENCE.findall(text):
        if name := re.search(r"file=(\S+)", info):
            files[name.group(1)] = body
        elif lang == "console":
            commands += [line[2:] for line in body.splitlines() if line.startswith("$ ")]
    return files, commands


def run(folder: Path, command: str) -> subprocess.CompletedProcess[str]:
    argv = command.split()
    assert argv[:2] == ["uv", "run"], command
    exe = sys.executable if argv[2] == "python" else str(BIN / argv[2])
    env = {k: v for k, v in os.environ.items() if k != "BACKINTEL_DATA_DIR"}
    return subprocess.run(
        [exe, *argv[3:]], cwd=folder, env=env, capture_output=True, text=True, timeout=900,
        check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("own-prediction")
    files, commands = example()
    assert set(files) == {"make_churn.py", "predict/churn.scenario.yaml"}
    for path, body in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(body, encoding="utf-8")
    expected = [0, 0, 0, 0, 1]  # the perturbed analyst fails
    assert len(commands) == len(expected)
    for command, code in zip(commands, expected, strict=True):
        done = run(folder, command)
        assert done.returncode == code, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return folder


def records(folder: Path, run_id: str) -> list[dict[str, object]]:
    lines = (folder / "results" / run_id / "records.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_the_documented_own_data_prediction_runs_as_written(project: Path) -> None:
    con = sqlite3.connect(project / "churn.sqlite")
    columns = [r[1] for r in con.execute("PRAGMA table_info(customers_scoring)")]
    con.close()
    assert "churned" not in columns, "the scoring labels are not in the store"
    lock = json.loads((project / "predict" / "backintel.lock.json").read_text())
    entry = lock["scenarios"]["churn-next-quarter"]
    assert entry["computed_by"] == "prediction.labels"
    cohort = entry["values"]["cohort"]
    assert len(cohort) == 400
    assert {r["label"] for r in cohort} == {0.0, 1.0}
    (ok,) = records(project, "churn")
    assert ok["outcome"] == "pass", ok["reasons"]
    prediction = ok["prediction"]
    assert isinstance(prediction, dict)
    assert prediction["permuted"]["criteria_met"] is False
    assert prediction["perturbed"]["criteria_met"] is False
    (wrong,) = records(project, "churn-perturbed")
    assert wrong["outcome"] == "wrong_value"


def test_a_labels_file_that_does_not_match_the_scoring_table_stops_the_build(
    project: Path,
) -> None:
    labels = project / "predict" / "churn-labels.csv"
    original = labels.read_text()
    try:
        labels.write_text(original + "c00001,1\n")  # a training customer
        done = run(project, "uv run backintel references build")
        assert done.returncode == 1
        assert "churn.scenario.yaml:" in done.stderr + done.stdout
        assert "1 labelled customer_id(s) are not in customers_scoring (e.g. 'c00001')" in (
            done.stderr + done.stdout
        )
        labels.write_text("\n".join(original.splitlines()[:-1]) + "\n")  # one label missing
        done = run(project, "uv run backintel references build")
        assert done.returncode == 1
        assert "1 scoring customer_id(s) have no label" in done.stderr + done.stdout
    finally:
        labels.write_text(original)
    done = run(project, "uv run backintel references build")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_prediction_scenario_over_a_source_other_than_sqlite_is_refused_naming_its_line(
    project: Path, tmp_path: Path
) -> None:
    """Its leakage re-runs need a SQLite file to copy; on another source they could not run,
    so the scenario is refused at collection (never scored without them)."""
    import duckdb

    scenario = project / "predict" / "churn.scenario.yaml"
    text = scenario.read_text()
    folder = tmp_path / "p"
    (folder / "predict").mkdir(parents=True)
    (folder / "predict" / "churn-labels.csv").write_text(
        (project / "predict" / "churn-labels.csv").read_text()
    )
    duckdb.connect(str(folder / "churn.duckdb")).close()  # refused before it is read
    bound = text.replace("sqlite: ../churn.sqlite", "duckdb: ../churn.duckdb")
    assert bound != text, text
    (folder / "predict" / "churn.scenario.yaml").write_text(bound)
    done = run(folder, "uv run backintel validate predict")
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "churn.scenario.yaml:" in out, out
    assert "needs a sqlite source, not duckdb" in out, out
