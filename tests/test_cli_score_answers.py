"""`backintel score --answers`: many answers in one process, each scored as `score --case`
scores it; a bad line is reported with its file:line and never stops the others."""

import json
from pathlib import Path

import pytest

from pytest_backintel.cli.commands import main

SQL = (
    "SELECT SUM(CASE WHEN order_status = 'delivered' THEN 1 ELSE 0 END) "
    "AS delivered_orders FROM orders"
)


def truth() -> int:
    from scenarios.references import REFERENCES_DIR

    refs = json.loads((REFERENCES_DIR / "olist.json").read_text())["references"]
    return int(refs["l1-delivered-orders"]["values"]["delivered_orders"])


def answer(value: object) -> dict[str, object]:
    return {
        "status": "answered",
        "metrics": [{"name": "delivered_orders", "value": value, "unit": "orders"}],
        "evidence": [{"id": "e1", "kind": "sql", "code": SQL, "metrics": ["delivered_orders"]}],
    }


def line(value: object, case: str = "l1-delivered-orders") -> str:
    return json.dumps({"case": case, "answer": answer(value)})


def test_right_answers_pass_wrong_ones_fail_and_bad_lines_are_said_with_their_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = tmp_path / "answers.jsonl"
    lines = [
        line(truth()),
        line(truth() + 1),
        "{not json",
        "",
        line(1, case="l1-delivered-order"),
        json.dumps({"case": "l1-delivered-orders", "answer": {"status": "answered"}}),
        json.dumps(["l1-delivered-orders"]),
        line(truth()),
    ]
    answers.write_text("\n".join(lines) + "\n")
    out = tmp_path / "scored.jsonl"
    code = main(["score", "--answers", str(answers), "--out", str(out)])
    said = capsys.readouterr()
    assert code == 2, said  # a line could not be scored
    assert said.out.splitlines()[0] == f"{answers}:1: l1-delivered-orders: pass"
    assert said.out.splitlines()[1].startswith(f"{answers}:2: l1-delivered-orders: wrong_value (")
    assert said.out.splitlines()[2] == f"{answers}:8: l1-delivered-orders: pass"
    assert said.out.splitlines()[-1] == "7 answers: 2 pass, 1 fail, 4 not scored"
    errors = said.err.splitlines()
    assert errors[0].startswith(f"{answers}:3: not JSON: ")
    assert errors[1].startswith(f"{answers}:5: unknown case 'l1-delivered-order'. Did you mean")
    assert errors[2].startswith(f"{answers}:6: l1-delivered-orders: not a contract answer: ")
    assert errors[3].startswith(f"{answers}:7: expected one JSON object per line")
    results = [json.loads(r) for r in out.read_text().splitlines()]
    scored = {1: "pass", 2: "wrong_value", 3: None, 5: None, 6: None, 7: None, 8: "pass"}
    assert [(r["where"], r["outcome"]) for r in results] == [
        (f"{answers}:{n}", o) for n, o in scored.items()
    ]
    assert results[0]["evidence"][0]["reproduced"] == {"delivered_orders": True}
    assert "unknown case" in results[3]["error"]


def test_a_batch_exits_0_when_all_pass_and_1_when_one_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = tmp_path / "answers.jsonl"
    answers.write_text(line(truth()) + "\n" + line(truth()) + "\n")
    assert main(["score", "--answers", str(answers)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "2 answers: 2 pass, 0 fail, 0 not scored"
    answers.write_text(line(truth()) + "\n" + line(0) + "\n")
    assert main(["score", "--answers", str(answers)]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "2 answers: 1 pass, 1 fail, 0 not scored"


def test_a_folder_of_answer_files_is_scored_by_file_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "answers"
    folder.mkdir()
    (folder / "l1-delivered-orders.json").write_text(json.dumps(answer(truth() - 1)))
    (folder / "acc-dev-signed-revenue.json").write_text(
        json.dumps({"status": "refused", "missing": ["the data"], "explanation": "cannot"})
    )
    (folder / "notes.txt").write_text("not an answer")  # only *.json files are answers
    assert main(["score", "--answers", str(folder)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{folder / 'acc-dev-signed-revenue.json'}: acc-dev-signed-revenue: "
                             "false_refusal")  # fmt: skip
    assert out[1].startswith(f"{folder / 'l1-delivered-orders.json'}: l1-delivered-orders: "
                             "wrong_value")  # fmt: skip
    assert out[-1] == "2 answers: 0 pass, 2 fail, 0 not scored"


def test_a_missing_answers_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["score", "--answers", str(tmp_path / "none.jsonl")]) == 2
    assert "no " in capsys.readouterr().err
