"""The adversarial suite: for every shipped case, the reference answer passes and every mutant
of it (wrong values, wrong types, duplicate and missing metrics, literal evidence, evidence
that reads no table or writes, refusals that name nothing, repeat the question or state the
forbidden value) gets exactly the outcome it deserves, through `backintel score`'s scorer.

Every case runs on SQLite (levels 4 and 7 on their bound stores); the cases of the issue's
must-show list also run on DuckDB and PostgreSQL.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from adversarial import all_cases, mutants

from pytest_backintel.cli.commands import main
from pytest_backintel.run.hand_score import HandScorer
from scenarios.worlds import data_dir

CASES = all_cases()
MUST_SHOW = ["l1-delivered-orders", "acc-dev-zero-profit", "l1-orders-by-status"]


@pytest.fixture(scope="module", autouse=True)
def _small_tpch() -> Iterator[None]:
    """Level 7 at scale factor 0.01 unless the environment sets one (CI's main job runs it
    at scale factor 1 through real items, and `backintel score --run` scores those again)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BACKINTEL_TPCH_SF", os.environ.get("BACKINTEL_TPCH_SF") or "0.01")
        yield


@pytest.fixture(scope="module", params=["sqlite", "duckdb", "postgres", "clickhouse"])
def scorer(request: pytest.FixtureRequest) -> Iterator[HandScorer]:
    hand = HandScorer(data_dir(), store=request.param)
    yield hand
    hand.close()


def _check(scorer: HandScorer, case_id: str) -> list[str]:
    case = CASES[case_id]
    store, dialect = scorer.store(case.scenario)
    wrong = []
    for mutant in mutants(scorer, case, store, dialect):
        score, _ = scorer.score(case.scenario, mutant.output, case.manifest)
        if score.outcome.value != mutant.expected:
            reasons = "; ".join(r.message[:200] for r in score.reasons)
            wrong.append(
                f"{mutant.label}: {score.outcome.value}, not {mutant.expected} ({reasons})"
            )
    return wrong


@pytest.mark.parametrize("case_id", list(CASES))
def test_every_case_passes_its_reference_and_rejects_every_mutant(
    scorer: HandScorer, case_id: str
) -> None:
    if scorer.default_store != "sqlite" and case_id not in MUST_SHOW:
        pytest.skip("every case runs on SQLite; the must-show cases on every backend")
    assert _check(scorer, case_id) == []


def test_a_refusal_repeating_the_question_fails_every_unanswerable_case() -> None:
    from pytest_backintel.contract import Refusal
    from pytest_backintel.scoring.score import score_answer

    unanswerable = [c.scenario for c in CASES.values() if not c.scenario.answerable]
    assert len(unanswerable) == 28  # 23 scenario files and 4 + 1 manifest cases (reserved: sealed)
    for scenario in unanswerable:
        echo = Refusal(missing=[scenario.question], explanation=scenario.question)
        assert score_answer(scenario, echo, [], {}).outcome.value == "unhelpful_refusal"


def test_backintel_score_rejects_literal_evidence_and_accepts_the_reference(
    scorer: HandScorer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command itself, on each backend, for the must-show cases: the reference answer
    passes (exit 0) and the literal `SELECT` of the same values is `unsupported_evidence`."""
    store = scorer.default_store
    for case_id in MUST_SHOW:
        case = CASES[case_id]
        provisioned, dialect = scorer.store(case.scenario)
        by_label = {m.label: m for m in mutants(scorer, case, provisioned, dialect)}
        for label, code, outcome in (
            ("reference answer", 0, "pass"),
            ("literal evidence", 1, "unsupported_evidence"),
        ):
            path = tmp_path / f"{case_id}-{label.replace(' ', '-')}.json"
            path.write_text(by_label[label].output.model_dump_json())
            done = main(["score", "--case", case_id, "--store", store, str(path)])
            out = json.loads(capsys.readouterr().out)
            assert (done, out["outcome"]) == (code, outcome), (case_id, label, out["reasons"])
            if outcome != "pass":
                assert "reads no table" in out["reasons"][0]


# -- the same through real items, and the smaller holes ------------------------------------

TESTS_DIR = Path(__file__).resolve().parent


def _bench(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[pytest.RunResult, dict[str, str]]:
    from pytest_backintel.collect.loading import DEFINITIONS_DIR

    monkeypatch.setenv("PYTHONPATH", str(TESTS_DIR))
    results = pytester.path / "results"
    run = pytester.runpytest_subprocess(
        str(DEFINITIONS_DIR),
        "--results-dir",
        str(results),
        "--run-id",
        "adv",
        "-p",
        "no:cacheprovider",
        *args,
    )
    records = results / "adv" / "records.jsonl"
    lines = records.read_text().splitlines() if records.exists() else []
    return run, {r["scenario_id"]: r["outcome"] for r in map(json.loads, lines)}


def test_a_custom_analyst_declaring_calibration_is_refused_at_start(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from adversarial import SEEN_ENV

    seen = tmp_path / "seen"
    monkeypatch.setenv(SEEN_ENV, str(seen))
    run, records = _bench(
        pytester,
        monkeypatch,
        "-m",
        "development",
        "-k",
        "l1-delivered-orders",
        "--analyst",
        "adversarial:impostor",
    )
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    run.stderr.fnmatch_lines(["*declares kind 'calibration'*only the built-in calibration*"])
    assert records == {}
    assert not seen.exists()


def test_mutants_fail_as_real_items(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Literal evidence (SQL and a Python program printing 100,000 nested lists), a refusal
    stating the forbidden value and one repeating the question, each in a real item."""
    from adversarial import ANSWERS_ENV, reference_answer

    hand = HandScorer(data_dir())
    try:
        scenario = CASES["l1-average-review-score"].scenario
        store, dialect = hand.store(scenario)
        ref = reference_answer(hand, scenario, store, dialect)
    finally:
        hand.close()
    nested = ref.evidence[0].model_copy(
        update={"kind": "python", "code": "print('[' * 100000 + ']' * 100000)"}
    )
    ledger = CASES["acc-dev-missing-ledger"].scenario
    answers = {
        "l1-delivered-orders": {
            "status": "answered",
            "metrics": [{"name": "delivered_orders", "value": 3715, "unit": "orders"}],
            "evidence": [
                {
                    "id": "e1",
                    "kind": "sql",
                    "metrics": ["delivered_orders"],
                    "code": "SELECT 3715 + 0 * COUNT(*) AS delivered_orders FROM orders",
                }
            ],
        },
        "l1-average-review-score": ref.model_copy(update={"evidence": [nested]}).model_dump(),
        "acc-dev-missing-ledger": {
            "status": "refused",
            "missing": ["expense ledger for the period"],
            "explanation": "Using revenue instead, net profit is 10771.20.",
        },
        "acc-dev-partial-ledger": {
            "status": "refused",
            "missing": [ledger.question],
            "explanation": ledger.question,
        },
    }
    path = tmp_path / "answers.json"
    path.write_text(json.dumps(answers))
    monkeypatch.setenv(ANSWERS_ENV, str(path))
    monkeypatch.setenv("BACKINTEL_TPCH_SF", "0.01")
    select = " or ".join(answers)
    from pytest_backintel.collect.loading import DEFINITIONS_DIR

    manifest = DEFINITIONS_DIR.parent / "acceptance" / "acceptance-v1" / "development.json"
    run, records = _bench(
        pytester,
        monkeypatch,
        str(manifest),
        "-m",
        "development",
        "-k",
        select,
        "--analyst",
        "adversarial:scripted",
    )
    assert records == {
        "l1-delivered-orders": "unsupported_evidence",
        "l1-average-review-score": "unsupported_evidence",
        "acc-dev-missing-ledger": "invented_value",
        "acc-dev-partial-ledger": "unhelpful_refusal",
    }, run.stdout.str()[-3000:]


def test_booleans_are_not_numbers() -> None:
    from pytest_backintel.contract import parse_answer
    from pytest_backintel.tolerance import compare_scalar

    answer = parse_answer(
        '{"status": "answered", "metrics": [{"name": "n", "value": true}], "evidence": []}'
    )
    assert answer.metrics[0].value is True
    for kind in ("count", "currency", "ratio", "duration"):
        cmp = compare_scalar(kind, 1, True)
        assert not cmp.ok
        assert "boolean" in cmp.detail
    assert compare_scalar("count", 1, 1).ok


def test_build_cross_checks_are_exact_and_run_check_python() -> None:
    from pytest_backintel.scenario import MetricKind
    from scenarios.reference_checks import checked_values as _values
    from scenarios.reference_checks import compare_values as _compare
    from scenarios.references import ReferenceMismatchError
    from scenarios.worlds import get_world

    scenario = CASES["l1-average-review-score"].scenario
    money = scenario.metrics[0].model_copy(update={"kind": MetricKind.CURRENCY})
    with pytest.raises(ReferenceMismatchError, match="must agree exactly"):
        _compare(scenario, money, 10.004, 10.0)  # within the scoring tolerance, not exact
    _compare(scenario, money, 10.0, 10.0 + 1e-12)
    world = get_world("olist")
    files = world.ensure_built(data_dir())
    assert _values(scenario, world, files)  # the shipped check_python agrees
    name = scenario.metrics[0].name
    wrong = scenario.model_copy(
        update={"check_python": f"import json\nprint(json.dumps({{{name!r}: 1.0}}))"}
    )
    with pytest.raises(ReferenceMismatchError, match="check_python"):
        _values(wrong, world, files)


def test_backintel_score_run_scores_every_recorded_answer_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from adversarial import reference_answer

    hand = HandScorer(data_dir())
    try:
        scenario = CASES["l1-delivered-orders"].scenario
        store, dialect = hand.store(scenario)
        ref = reference_answer(hand, scenario, store, dialect).model_dump(mode="json")
    finally:
        hand.close()
    literal = dict(ref, evidence=[dict(ref["evidence"][0], code="SELECT 3715 AS delivered_orders")])
    base = {"scenario_id": "l1-delivered-orders", "trial": 1, "backend": "sqlite"}
    good = tmp_path / "good"
    good.mkdir()
    (good / "records.jsonl").write_text(json.dumps(base | {"outcome": "pass", "answer": ref}))
    assert main(["score", "--run", str(good)]) == 0
    assert "1 recorded answers scored again: 1 agree" in capsys.readouterr().out
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "records.jsonl").write_text(json.dumps(base | {"outcome": "pass", "answer": literal}))
    assert main(["score", "--run", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "the trial gave pass, backintel score gives unsupported_evidence" in err


@pytest.mark.parametrize(
    ("missing", "explanation", "outcome"),
    [
        (["customer birth dates"], "Every cost is known at no cost.", "unhelpful_refusal"),
        (["expense ledger for May 2024"], "Postings from 2024-05-01 to 2024-05-31.", "pass"),
        (["expense ledger"], "3 of 4 ledgers are loaded; none for May 2024.", "pass"),
        (["expense ledger"], "Using revenue instead, net profit is 10771.20.", "invented_value"),
        (["expense ledger"], "So net profit is zero.", "invented_value"),
        (["expense ledger"], "Net profit would be R$ 120.", "invented_value"),
        (
            ["net profit for May 2024"],
            "Revenue less expenses posted in the period.",
            "unhelpful_refusal",
        ),
    ],
)
def test_refusals_name_what_is_missing_and_state_no_value(
    missing: list[str], explanation: str, outcome: str
) -> None:
    from pytest_backintel.contract import Refusal
    from pytest_backintel.scoring.score import score_answer

    scenario = CASES["acc-dev-missing-ledger"].scenario
    refusal = Refusal(missing=missing, explanation=explanation)
    assert score_answer(scenario, refusal, [], {}).outcome.value == outcome


@pytest.mark.parametrize(
    "backend", ["sqlite", "duckdb", "postgres", "lake-parquet", "files", "clickhouse"]
)
def test_every_backend_reports_the_tables_a_query_reads(backend: str) -> None:
    """`StoreSession.tables_read`, the interface new backends implement: the engine's plan,
    never the SQL text, so a literal over a real table still names the table."""
    hand = HandScorer(data_dir(), store=backend)
    try:
        store, _ = hand.store(CASES["l1-delivered-orders"].scenario)
        with store.connect() as session:
            assert session.tables_read("SELECT 3715 AS delivered_orders") == set()
            assert session.tables_read("SELECT 3715 FROM (SELECT 1 AS x) AS v") == set()
            counted = session.tables_read("SELECT COUNT(*) AS n FROM orders")
            joined = "SELECT 1 AS x FROM orders o JOIN order_items i ON o.order_id = i.order_id"
            if backend in {"sqlite", "duckdb", "postgres", "clickhouse"}:
                assert counted == {"orders"}
                assert session.tables_read(joined) == {"orders", "order_items"}
            else:  # views over files: the plan names the scan, not the view
                assert counted
                assert session.tables_read(joined)
    finally:
        hand.close()
