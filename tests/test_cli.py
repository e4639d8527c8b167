"""`backintel score` scores a hand-written answer as a trial would; `schema --check` guards."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_backintel.cli.commands import main

DELIVERED_SQL = (
    "SELECT SUM(CASE WHEN order_status = 'delivered' THEN 1 ELSE 0 END) "
    "AS delivered_orders FROM orders"
)


def answer(tmp_path: Path, value: object, code: str = DELIVERED_SQL) -> Path:
    path = tmp_path / "answer.json"
    path.write_text(
        json.dumps(
            {
                "status": "answered",
                "metrics": [{"name": "delivered_orders", "value": value, "unit": "orders"}],
                "evidence": [
                    {"id": "e1", "kind": "sql", "code": code, "metrics": ["delivered_orders"]}
                ],
            }
        )
    )
    return path


def score(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main(["score", *args])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def test_a_right_answer_passes_and_a_wrong_one_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from scenarios.references import REFERENCES_DIR

    refs = json.loads((REFERENCES_DIR / "olist.json").read_text())["references"]
    truth = refs["l1-delivered-orders"]["values"]["delivered_orders"]
    code, result = score(capsys, "--case", "l1-delivered-orders", str(answer(tmp_path, truth)))
    assert (code, result["outcome"]) == (0, "pass")
    code, result = score(capsys, "--case", "l1-delivered-orders", str(answer(tmp_path, truth + 1)))
    assert (code, result["outcome"]) == (1, "wrong_value")
    code, result = score(
        capsys,
        "--case",
        "l1-delivered-orders",
        str(answer(tmp_path, truth, "SELECT 1 AS delivered_orders")),
    )
    assert (code, result["outcome"]) == (1, "unsupported_evidence")


def test_acceptance_cases_are_scored_against_their_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "refusal.json"
    path.write_text(
        json.dumps({"status": "refused", "missing": ["the data"], "explanation": "cannot"})
    )
    code, result = score(capsys, "--case", "acc-dev-signed-revenue", str(path))
    assert (code, result["outcome"]) == (1, "false_refusal")


def test_unknown_cases_and_malformed_answers_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["score", "--case", "l1-delivered-order", str(answer(tmp_path, 1))]) == 2
    assert "Did you mean l1-delivered-orders" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"status": "answered", "metrics": [{"name": "x", "value": "12 BRL"}]}')
    assert main(["score", "--case", "l1-delivered-orders", str(bad)]) == 2
    assert "not a contract answer" in capsys.readouterr().err


def test_schema_check_passes_on_the_committed_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "--check"]) == 0


def test_a_reader_that_stops_early_gets_no_traceback() -> None:
    """`backintel ... | head`: the pipe closes before the command has written everything; the
    command stops quietly with the shell's status for SIGPIPE instead of a traceback."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "backintel"), "references", "benchmark", "--check"],
            stdout=write, stderr=subprocess.PIPE, text=True, timeout=300, check=False,
        )  # fmt: skip
    finally:
        os.close(write)
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr


def test_scoring_removes_its_folders_when_it_closes(tmp_path: Path) -> None:
    from pytest_backintel.collect.loading import load_scenario_file
    from pytest_backintel.collect.worlds import data_dir
    from pytest_backintel.contract import parse_answer
    from pytest_backintel.run.hand_score import HandScorer

    root = Path(__file__).resolve().parents[1]
    scenario = load_scenario_file(
        root / "scenarios" / "definitions" / "level1" / "l1-delivered-orders.scenario.yaml"
    )
    data = data_dir(Path.cwd())
    scorer = HandScorer(data)
    scorer.score(scenario, parse_answer(answer(tmp_path, 1).read_text()))
    pid = str(os.getpid())
    mine = [data / "sandbox" / f"score-{pid}", data / "stores" / "sqlite" / pid]
    assert all(p.is_dir() for p in mine), mine  # control: scoring made them
    scorer.close()
    assert [p for p in mine if p.exists()] == []
