"""`backintel plan` against the textbook paired-design formula on the worked example the docs
show, `--trials auto:EFFECT:RUN` on a pytest run, and `backintel review`: an append-only
override that reports count apart and use only with `--with-reviews`."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from helpers import FEW
from scipy.stats import norm

from pytest_backintel.records.power import PlanError, effect_floor, make_plan, parse_auto_trials
from reports.cli import main
from reports.testing import header, record, write_run

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "statistics.md"


def worked_example(folder: Path) -> Path:
    """The docs' baseline: 40 cases x 4 trials; 20 cases pass 1 of 4, 20 pass 3 of 4."""
    records = [
        record(f"c{i:02d}", "pass" if t < (1 if i < 20 else 3) else "wrong_value", trial=t + 1)
        for i in range(40)
        for t in range(4)
    ]
    return write_run(folder, header("base", trials=4), records)


def textbook_n(sigma_d: float, delta: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """n = ((z(1 - alpha/2) + z(power)) * sigma_d / delta)^2, rounded up (any textbook)."""
    return math.ceil(((norm.ppf(1 - alpha / 2) + norm.ppf(power)) * sigma_d / delta) ** 2)


def test_plan_agrees_with_the_textbook_paired_formula(tmp_path: Path) -> None:
    from pytest_backintel.records.power import baseline_outcomes

    plan = make_plan(baseline_outcomes(worked_example(tmp_path / "base")), effect=0.1)
    # within-case variance: p(1 - p) * m / (m - 1) = 0.1875 * 4 / 3 = 0.25 for every case
    assert plan.within_variance == pytest.approx(0.25)
    assert not plan.bounded
    # k trials per case in each run: sigma_d^2 = 2 * 0.25 / k; the textbook n over 40 cases
    k = plan.trials_needed()
    assert k == 10
    assert textbook_n(math.sqrt(0.5 / k), 0.1) <= 40 < textbook_n(math.sqrt(0.5 / (k - 1)), 0.1)
    assert plan.cases_needed(4) == textbook_n(math.sqrt(0.5 / 4), 0.1) == 99
    # what a budget detects: the same formula solved for delta
    assert plan.detectable(10) == pytest.approx(
        (norm.ppf(0.975) + norm.ppf(0.8)) * math.sqrt(0.5 / 10 / 40)
    )


def test_the_docs_example_is_what_the_command_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/statistics.md shows the command and its output; both are run here."""
    text = DOC.read_text(encoding="utf-8")
    block = text.split("<!-- plan example -->", 2)[1]
    command = re.search(r"uv run backintel (plan [^\n]+)", block)
    assert command is not None
    shown = block.split("```text\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    worked_example(tmp_path / "results" / "base")
    assert main(command.group(1).split()) == 0
    assert capsys.readouterr().out == shown


def test_plan_refuses_bad_input_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = worked_example(tmp_path / "base")
    assert main(["plan", "--baseline", str(base), "--effect", "1.5"]) == 2
    assert "effect: a number between 0 and 1 (exclusive), got 1.5" in capsys.readouterr().err
    assert main(["plan", "--baseline", str(tmp_path / "nope"), "--effect", "0.1"]) == 2
    assert "no records.jsonl" in capsys.readouterr().err
    with pytest.raises(PlanError, match="auto needs the effect and the baseline run"):
        parse_auto_trials("auto:0.05")
    with pytest.raises(PlanError, match="'x' is not a number"):
        parse_auto_trials("auto:x:results/b")
    assert parse_auto_trials("3") is None
    one_trial = {f"c{i}": [i % 2 == 0] for i in range(10)}
    bounded = make_plan(one_trial, 0.2)
    assert bounded.bounded
    assert bounded.within_variance == pytest.approx(0.25)
    assert "one trial per case: an upper bound" in bounded.lines()[0]


def test_trials_auto_runs_as_many_trials_as_the_plan_needs(pytester: pytest.Pytester) -> None:
    """`--trials auto:0.45:BASELINE`: the plan over the baseline's cases decides the trials."""
    base = pytester.path / "base"
    records = [
        record(case, "pass" if t == 1 else "wrong_value", trial=t)
        for case in ("l1-item-grain", "l1-orders-by-status", "l3-customer-age")
        for t in (1, 2)
    ]
    write_run(base, header("base", trials=2), records)
    expected = make_plan({r["scenario_id"]: [True, False] for r in records}, 0.45)
    k = expected.trials_needed()
    assert k > 1
    result = pytester.runpytest(
        str(FEW[0]), "--collect-only", "-q", "-p", "no:xdist", "--trials", f"auto:0.45:{base}"
    )  # fmt: skip
    shown = result.stdout.str()
    assert all(f"l1-item-grain[t{t}]" in shown for t in range(1, k + 1)), shown
    assert f"l1-item-grain[t{k + 1}]" not in shown
    bad = pytester.runpytest(
        str(FEW[0]), "--collect-only", "-p", "no:xdist", "--trials", "auto:0.45"
    )
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*auto needs the effect and the baseline run*"])


# -- review ---------------------------------------------------------------------------------


def own_run(folder: Path, outcomes: dict[str, str]) -> Path:
    head = header(folder.name, calibration=False)
    head["suites"] = {"shop": {"policy": {}}}
    records = [
        record(c, o, trial=1, run_id=folder.name, kind="custom") | {"suite": "shop"}
        for c, o in outcomes.items()
    ]
    return write_run(folder, head, records)


def test_a_review_is_appended_counted_apart_and_used_only_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = [f"c{i:02d}" for i in range(12)]
    base = own_run(tmp_path / "base", dict.fromkeys(cases, "wrong_value"))
    # the candidate fixes 5 cases; a sixth is a scorer's false negative a person overrides
    cand_outcomes = {c: "pass" if i < 5 else "wrong_value" for i, c in enumerate(cases)}
    cand = own_run(tmp_path / "cand", cand_outcomes)
    before = (cand / "records.jsonl").read_bytes()

    assert (
        main(["review", str(cand), "c05/t1", "--outcome", "pass", "--reason", "", "--author", "a"])
        == 2
    )
    assert "empty reason" in capsys.readouterr().err
    assert (
        main(["review", str(cand), "nope", "--outcome", "pass", "--reason", "r", "--author", "a"])
        == 2
    )
    assert "no trial 'nope'" in capsys.readouterr().err
    review = ["review", str(cand), "--outcome", "pass", "--author"]
    assert main([*review, "Ann", "c05", "--reason", "unit is cents"]) == 0
    assert "c05/t1: wrong_value -> pass" in capsys.readouterr().out
    assert main([*review, "Bo", "c06/t1", "--reason", "rounding"]) == 0
    capsys.readouterr()
    (first, second) = [json.loads(x) for x in (cand / "reviews.jsonl").read_text().splitlines()]
    assert (first["case_key"], first["original"], first["outcome"]) == (
        "c05/t1",
        "wrong_value",
        "pass",
    )
    assert (first["author"], first["reason"]) == ("Ann", "unit is cents")
    assert second["author"] == "Bo"
    assert first["time"]
    assert (cand / "records.jsonl").read_bytes() == before  # records are never rewritten

    # without --with-reviews: recorded outcomes, the overrides counted and named apart
    assert main(["compare", str(base), str(cand)]) == 0
    out = capsys.readouterr().out
    assert "fixed 5," in out
    assert "reviews: 2 trials of cand overridden by review (reviews.jsonl); not used" in out
    # with it: the two reviewed trials pass, said in the output
    assert main(["compare", str(base), str(cand), "--with-reviews"]) == 0
    used = capsys.readouterr().out
    assert "fixed 7," in used
    assert (
        "reviews: 2 trials of cand overridden by review (reviews.jsonl); used (--with-reviews)"
        in used
    )
    # the scorecard counts them the same way
    assert main(["report", str(cand)]) == 0
    assert "not used" in (cand / "scorecard.md").read_text()
    assert main(["report", str(cand), "--with-reviews"]) == 0
    card = (cand / "scorecard.md").read_text()
    assert "used (--with-reviews)" in card
    assert "7 passed" in card


def test_a_blocked_trial_cannot_be_reviewed_and_a_later_review_supersedes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from reports.load import load_run
    from reports.reviews import apply_reviews

    run = own_run(tmp_path / "r", {"a": "infra_error", "b": "pass"})
    assert (
        main(["review", str(run), "a/t1", "--outcome", "pass", "--reason", "x", "--author", "A"])
        == 2
    )
    assert "it was not measured" in capsys.readouterr().err
    for outcome in ("fail", "pass", "fail"):
        args = [
            "review",
            str(run),
            "b/t1",
            "--outcome",
            outcome,
            "--reason",
            outcome,
            "--author",
            "A",
        ]
        assert main(args) == 0
    applied, changed = apply_reviews(load_run(run))
    b = next(r for r in applied.records if r["scenario_id"] == "b")
    assert (b["outcome"], changed) == ("reviewed_fail", 1)
    assert [h["previous"] for h in b["review"]["history"]] == ["pass", "reviewed_fail", "pass"]


def test_an_all_pass_baseline_still_needs_the_cases_the_effect_itself_calls_for() -> None:
    """No variance in the baseline is no licence to detect 5 points with two cases: the plan
    assumes at least the variance the shift itself brings, and says so."""
    plan = make_plan({f"c{i}": [True] for i in range(131)}, effect=0.05)
    assert plan.floored
    assert plan.within_variance == effect_floor(0.05)
    assert plan.cases_needed(1) == 150  # z**2 * 2 * 0.02375 / 0.05**2 with z = 2.8016
    assert plan.trials_needed() == 2
    assert "the baseline varied less" in plan.lines()[0]
