"""`backintel compare` on a suite of your own: a repository built from scratch, runs of the
user's own agent, and a verdict a team can act on (better / worse), while `--policy
acceptance` still decides by the shipped promotion rule."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from reports.summary import CaseSummary
from reports.verdict import BETTER, NO_DIFFERENCE, WORSE, PairedCase, Policy, decide_paired

BIN = Path(sys.executable).parent

AGENT = """
from pytest_backintel.analyst_api import AnalystConfig, AnalystRun, AnalystTask
from pytest_backintel.contract import AnalystAnswer, Evidence, MetricValue, Refusal

QUERIES = {
    "delivered": ("delivered_orders",
                  "SELECT COUNT(*) AS delivered_orders FROM orders WHERE status = 'delivered'"),
    "canceled": ("canceled_orders",
                 "SELECT COUNT(*) AS canceled_orders FROM orders WHERE status = 'canceled'"),
    "germany": ("german_customers",
                "SELECT COUNT(*) AS german_customers FROM customers WHERE country = 'DE'"),
}


class Agent:
    kind = "custom"

    def __init__(self, name, known):
        self.name, self.known = name, known

    def answer(self, task: AnalystTask) -> AnalystRun:
        for word in self.known:
            if word in task.question.lower():
                metric, sql = QUERIES[word]
                with task.connect() as store:
                    value = store.run_sql(sql).rows[0][0]
                return AnalystRun(AnalystAnswer(
                    metrics=[MetricValue(name=metric, value=value, unit="rows")],
                    evidence=[Evidence(id="e1", kind="sql", code=sql, metrics=[metric])],
                    method="counted",
                ))
        return AnalystRun(Refusal(missing=["a rule"], explanation="I do not know this one."))


def baseline(config: AnalystConfig) -> Agent:
    return Agent("v1", ["delivered", "germany"])


def fixes_one(config: AnalystConfig) -> Agent:
    return Agent("v2-fix", ["delivered", "germany", "canceled"])


def breaks_one(config: AnalystConfig) -> Agent:
    return Agent("v2-break", ["delivered"])
"""

SUITE = """
name: shop
datasets:
  shop: {sqlite: ../shop.sqlite}
dataset: shop
split: development
level: 1
"""


def scenario(case: str, question: str, metric: str, sql: str) -> str:
    return f"""
id: {case}
version: 1
title: {case}
question: {question}
family: counts
answerable: true
metrics:
  - {{name: {metric}, kind: count, unit: rows}}
reference:
  sql: {sql}
"""


CASES = [
    ("delivered-orders", "How many orders were delivered?", "delivered_orders",
     "orders WHERE status = 'delivered'"),
    ("canceled-orders", "How many orders were canceled?", "canceled_orders",
     "orders WHERE status = 'canceled'"),
    ("german-customers", "How many customers live in Germany?", "german_customers",
     "customers WHERE country = 'DE'"),
]  # fmt: skip

MARGIN = """
id: gross-margin
version: 1
title: Gross margin
question: What was our gross margin?
family: margin
answerable: false
refusal:
  must_name: [[cost, cost of goods]]
  forbidden_metric: gross_margin
  conditions: no cost of goods is recorded
"""


@pytest.fixture
def repo(pytester: pytest.Pytester) -> pytest.Pytester:
    """A user's repository: a SQLite file, a suite file binding it by alias, four scenarios
    (one no agent answers well), an agent module, references locked."""
    con = sqlite3.connect(pytester.path / "shop.sqlite")
    con.executescript(
        """
        CREATE TABLE customers (id INTEGER PRIMARY KEY, country TEXT NOT NULL);
        CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL
            REFERENCES customers (id), status TEXT NOT NULL);
        INSERT INTO customers VALUES (1, 'DE'), (2, 'FR'), (3, 'DE');
        INSERT INTO orders VALUES (1, 1, 'delivered'), (2, 2, 'canceled'), (3, 3, 'delivered');
        """
    )
    con.commit()
    con.close()
    pytester.makepyprojecttoml('[project]\nname = "shop-bench"\nversion = "0.1.0"\n')
    pytester.makepyfile(agent=AGENT)
    suite = pytester.path / "suite"
    suite.mkdir()
    (suite / "backintel-suite.yaml").write_text(SUITE)
    for case, question, metric, where in CASES:
        sql = f"SELECT COUNT(*) AS {metric} FROM {where}"
        (suite / f"{case}.scenario.yaml").write_text(scenario(case, question, metric, sql))
    (suite / "gross-margin.scenario.yaml").write_text(MARGIN)
    built = pytester.run(BIN / "backintel", "references", "build")
    assert built.ret == 0, built.stderr.str()
    return pytester


def run(repo: pytest.Pytester, factory: str) -> dict[str, str]:
    """One run of the user's agent; its outcomes by case."""
    result = repo.runpytest_subprocess(
        "suite", "-p", "no:xdist", "--analyst", f"agent:{factory}", "--run-id", factory
    )
    assert result.ret in (0, 1), result.stderr.str()
    lines = (repo.path / "results" / factory / "records.jsonl").read_text().splitlines()
    return {r["scenario_id"]: r["outcome"] for r in map(json.loads, lines)}


def compare(repo: pytest.Pytester, *args: str) -> pytest.RunResult:
    return repo.run(BIN / "backintel", "compare", *args)


def test_a_candidate_that_fixes_one_case_and_breaks_none_is_better_and_one_that_breaks_one_is_worse(
    repo: pytest.Pytester,
) -> None:
    base = run(repo, "baseline")
    assert base == {
        "delivered-orders": "pass",
        "german-customers": "pass",
        "canceled-orders": "false_refusal",
        "gross-margin": "unhelpful_refusal",
    }
    fixed = run(repo, "fixes_one")
    assert fixed == base | {"canceled-orders": "pass"}
    broken = run(repo, "breaks_one")
    assert broken == base | {"german-customers": "false_refusal"}

    # one case of four changed: every change points one way, but the paired interval over
    # four cases includes 0, so neither run is called better or worse (#37); both directions
    # say that the change is not significant (#42)
    better = compare(repo, "results/baseline", "results/fixes_one")
    assert better.ret == 0, better.stdout.str() + better.stderr.str()
    better.stdout.fnmatch_lines(
        [
            "suite shop: NO DETECTABLE DIFFERENCE",
            "*4 cases: both pass 2, fixed 1, broken 0, both fail 1, blocked 0",
            "*pass rate: baseline 50.0%, candidate 75.0%; exact McNemar p = 1.0000*",
            "*paired difference (candidate - baseline): +0.250 ?-0.546, +1.000? (paired over 4 "
            "cases, clustered by case, 95%)",
            "*smallest detectable difference: 0.700 (80% power, alpha 0.05)",
            "*canceled-orders*fixed*false_refusal -> pass",
            "*note: every case that changed was fixed (1), but the difference is not "
            "statistically significant*",
            "VERDICT: no detectable difference",
        ]
    )
    worse = compare(repo, "results/baseline", "results/breaks_one")
    assert worse.ret == 0, worse.stdout.str() + worse.stderr.str()
    worse.stdout.fnmatch_lines(
        [
            "suite shop: NO DETECTABLE DIFFERENCE",
            "*german-customers*broken*pass -> false_refusal",
            "*note: every case that changed was broken (1), but the difference is not "
            "statistically significant*",
            "*- broken: german-customers (pass -> false_refusal)",
            "VERDICT: no detectable difference",
        ]
    )
    # the shipped promotion rule, asked for: every case is mandatory, so the fix is rejected
    strict = compare(repo, "results/baseline", "results/fixes_one", "--policy", "acceptance")
    assert strict.ret == 1
    strict.stdout.fnmatch_lines(["DECISION: REJECT", "*mandatory case fails: gross-margin*"])
    # a policy for one call: the fixed case is mandatory and passes; a control that broke
    (repo.path / "policy.yaml").write_text("mandatory: [canceled-orders]\nalpha: 0.1\n")
    held = compare(repo, "results/baseline", "results/fixes_one", "--policy", "policy.yaml")
    assert held.ret == 0
    held.stdout.fnmatch_lines(["*policy: alpha 0.1; mandatory canceled-orders (policy.yaml)"])
    failing = compare(repo, "results/baseline", "results/breaks_one", "--policy", "policy.yaml")
    assert failing.ret == 1
    failing.stdout.fnmatch_lines(["*mandatory case fails: canceled-orders*"])


def test_a_suite_file_policy_control_that_regresses_is_worse_and_score_agrees(
    repo: pytest.Pytester,
) -> None:
    suite_file = repo.path / "suite" / "backintel-suite.yaml"
    suite_file.write_text(SUITE + "policy:\n  controls: [german-customers]\n  alpha: 0.2\n")
    run(repo, "baseline")
    run(repo, "breaks_one")
    worse = compare(repo, "results/baseline", "results/breaks_one")
    assert worse.ret == 1
    worse.stdout.fnmatch_lines(
        [
            "*policy: alpha 0.2; controls german-customers (suite file)",
            "*- control regressed: german-customers (pass -> false_refusal)",
        ]
    )
    # `backintel score --run` finds each of these scenarios and agrees with every outcome
    again = repo.run(BIN / "backintel", "score", "--run", "results/breaks_one")
    again.stdout.fnmatch_lines(
        ["4 recorded answers scored again: 4 agree with the trial; 1 pass, 3 fail"]
    )
    assert again.ret == 1  # answers failed, as pytest's exit status says
    repo.run(BIN / "backintel", "score", "--run", "results/baseline").stdout.fnmatch_lines(
        ["4 recorded answers scored again: 4 agree with the trial; 2 pass, 2 fail"]
    )


def test_a_bad_policy_file_is_named(pytester: pytest.Pytester) -> None:
    (pytester.path / "policy.yaml").write_text("alpha: 2\n")
    bad = compare(pytester, "results/a", "results/b", "--policy", "policy.yaml")
    assert bad.ret == 2
    bad.stderr.fnmatch_lines(["*policy.yaml: alpha: a number between 0 and 1, got 2"])
    (pytester.path / "policy.yaml").write_text("mandatory: delivered-orders\ncontrol: [x]\n")
    bad = compare(pytester, "results/a", "results/b", "--policy", "policy.yaml")
    bad.stderr.fnmatch_lines(
        ["*policy.yaml: unknown field(s) *control*; allowed: mandatory, controls, alpha"]
    )


# -- the verdict rule, case by case ---------------------------------------------------------


def pairs(changes: str) -> list[PairedCase]:
    """Cases from a string of changes: f fixed, b broken, p both pass, x both fail,
    k blocked (the candidate not measured)."""
    out = []
    for n, c in enumerate(changes):
        before = "pass" if c in "bp" else "wrong_value"
        after = {"f": "pass", "b": "wrong_value", "p": "pass", "x": "wrong_value"}.get(
            c, "infra_error"
        )
        out.append(PairedCase(f"c{n:03}", summary(f"c{n:03}", before), summary(f"c{n:03}", after)))
    return out


def summary(case: str, outcome: str) -> CaseSummary:
    return CaseSummary(case, "development", "1", "f", True, [outcome])


@pytest.mark.parametrize(
    ("changes", "verdict"),
    [
        ("fpx", NO_DIFFERENCE),  # one way, but the interval over 3 cases includes 0
        ("bpx", NO_DIFFERENCE),
        ("ffffffpppp", BETTER),  # +0.6 [+0.23, +0.97]; McNemar p = 0.031
        ("bbbbbbpppp", WORSE),
        ("ppxx", NO_DIFFERENCE),
        ("fb", NO_DIFFERENCE),  # one each way: p = 1
        ("f" * 9 + "b", BETTER),  # p = 0.0215 < 0.05
        ("f" * 7 + "b", NO_DIFFERENCE),  # interval excludes 0, but McNemar p = 0.0703
        ("b" * 9 + "f", WORSE),
        ("kp", NO_DIFFERENCE),  # the blocked case is left out and named
    ],
)
def test_the_verdict_rule(changes: str, verdict: str) -> None:
    result = decide_paired("s", pairs(changes), Policy())
    assert result.verdict == verdict, result.reasons
    assert result.reasons
    if "k" in changes:
        assert any("not measured" in n for n in result.notes)


def test_a_mandatory_case_or_a_control_overrides_the_counts() -> None:
    cases = pairs("fffffffffb")  # significantly better by the counts
    broken = cases[-1].scenario_id
    assert decide_paired("s", cases, Policy(controls=(broken,))).verdict == WORSE
    assert decide_paired("s", cases, Policy(mandatory=(broken,))).verdict == WORSE
    assert decide_paired("s", cases, Policy(mandatory=("c000",))).verdict == BETTER
    missing = decide_paired("s", cases, Policy(mandatory=("nope",)))
    assert missing.verdict == WORSE
    assert missing.reasons == ["mandatory case nope is not in these runs"]


def test_a_blocked_mandatory_case_is_worse() -> None:
    result = decide_paired("s", pairs("fk"), Policy(mandatory=("c001",)))
    assert result.verdict == WORSE
    assert "blocked, not measured" in result.reasons[0]


def test_pass_k_and_blocked_cases_of_an_own_suite(tmp_path: Path) -> None:
    """Several trials: a case passes only if every trial passed, pass^k is given per run; a
    blocked candidate case is left out and named; the result is a data object a viewer reads."""
    from reports import compare_runs, load_run
    from reports.testing import header, record, write_run

    def run(run_id: str, outcomes: dict[str, list[str]]) -> Path:
        records = [
            record(case, outcome, trial=t, run_id=run_id, kind="custom") | {"suite": "shop"}
            for case, trials in outcomes.items()
            for t, outcome in enumerate(trials, 1)
        ]
        head = header(run_id, calibration=False, trials=2)
        head["suites"] = {"shop": {"policy": {"mandatory": [], "controls": [], "alpha": 0.05}}}
        return write_run(tmp_path / run_id, head, records)

    base = run("b", {"a": ["pass", "wrong_value"], "b": ["pass", "pass"], "c": ["pass"] * 2})
    cand = run("c", {"a": ["pass", "pass"], "b": ["pass", "pass"], "c": ["infra_error"] * 2})
    result = compare_runs(load_run(base), load_run(cand))
    assert result.suites == []  # no shipped split: nothing decided by the promotion rule
    (verdict,) = result.verdicts
    assert (verdict.suite, verdict.verdict, result.ok) == ("shop", NO_DIFFERENCE, True)
    assert verdict.difference is not None
    assert verdict.difference.estimate == 0.25
    assert [c.change for c in verdict.cases] == ["fixed", "both_pass", "blocked"]
    assert verdict.notes[0] == "left out, not measured in both runs: c"
    assert (verdict.baseline_pass_rate, verdict.candidate_pass_rate) == (2 / 3, 1.0)
    assert verdict.baseline_pass_k == {1: 5 / 6, 2: 2 / 3}
    assert verdict.candidate_pass_k == {1: 1.0, 2: 1.0}  # the blocked case attempted nothing


def test_the_viewer_shows_an_own_suite_verdict(tmp_path: Path) -> None:
    """The viewer's comparison data carry an own suite's verdict and its paired cases."""
    from reports import compare_runs, load_run
    from reports.testing import header, record, write_run
    from reports.view.pairs import comparison_data

    def run(run_id: str, outcome: str) -> Path:
        head = header(run_id, calibration=False)
        head["suites"] = {"shop": {"policy": {}}}
        records = [
            record(c, o, run_id=run_id, kind="custom") | {"suite": "shop"}
            for c, o in (("a", outcome), ("b", "pass"))
        ]
        return write_run(tmp_path / run_id, head, records)

    base, cand = load_run(run("b", "wrong_value")), load_run(run("c", "pass"))
    data = comparison_data(compare_runs(base, cand), base, cand)
    assert data["result"]["verdict"] == NO_DIFFERENCE  # one case of two fixed: not significant
    (suite,) = data["suites"]
    assert (suite["stats"]["suite"], suite["stats"]["verdict"]) == ("shop", NO_DIFFERENCE)
    assert suite["counts"] == {"both_pass": 1, "fixed": 1}
