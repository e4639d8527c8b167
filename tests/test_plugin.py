"""The plugin end to end through pytester: calibration analysts, xdist, records, bad files."""

import json

import pytest

from pytest_backintel.collect.loading import DEFINITIONS_DIR, find_scenarios

# Level 7 (TPC-H at scale factor 1) runs in CI's main job; here it would only cost minutes.
# Level 8 (prediction: each trial trains a model in the sandbox, four times) has its own
# end-to-end tests in tests/test_prediction.py.
SELECTION = "development and not level7 and not level8"
SCENARIOS = {k: v for k, v in find_scenarios(DEFINITIONS_DIR).items() if v[1].level < 7}
ANSWERABLE = sorted(s.id for _, s in SCENARIOS.values() if s.answerable)
UNANSWERABLE = sorted(s.id for _, s in SCENARIOS.values() if not s.answerable)


def run_bench(
    pytester: pytest.Pytester, *args: str, run_id: str = "run", select: str = SELECTION
) -> tuple[pytest.RunResult, list[dict]]:
    results = pytester.path / "results"
    outcome = pytester.runpytest_subprocess(
        str(DEFINITIONS_DIR),
        "-m",
        select,
        "--results-dir",
        str(results),
        "--run-id",
        run_id,
        "-p",
        "no:cacheprovider",
        *args,
    )
    records_file = results / run_id / "records.jsonl"
    records = [json.loads(line) for line in records_file.read_text().splitlines()]
    return outcome, records


def outcomes_by_case(records: list[dict]) -> dict[str, str]:
    return {r["scenario_id"]: r["outcome"] for r in records}


def test_reference_analyst_passes_every_development_scenario(pytester: pytest.Pytester) -> None:
    result, records = run_bench(pytester, "-n", "2")
    result.assert_outcomes(passed=len(SCENARIOS))
    assert len(SCENARIOS) >= 15
    assert set(outcomes_by_case(records).values()) == {"pass"}
    result.stdout.fnmatch_lines(["*analyst reference (calibration analyst*"])
    run = json.loads((pytester.path / "results" / "run" / "run.json").read_text())
    assert run["analyst"]["calibration"] is True
    assert run["outcomes"] == {"pass": len(SCENARIOS)}
    assert run["scenario_hash"]
    assert run["data_hashes"]["olist"]


def test_refuse_all_passes_exactly_the_unanswerable_scenarios(pytester: pytest.Pytester) -> None:
    result, records = run_bench(pytester, "--analyst", "refuse-all", "-n", "2")
    outcomes = outcomes_by_case(records)
    assert {outcomes[c] for c in ANSWERABLE} == {"false_refusal"}
    assert {outcomes[c] for c in UNANSWERABLE} == {"pass"}
    assert len(UNANSWERABLE) >= 10
    result.assert_outcomes(passed=len(UNANSWERABLE), failed=len(ANSWERABLE))


@pytest.mark.parametrize(
    ("analyst", "answerable_outcome"),
    [
        ("perturbed", "wrong_value"),
        ("unsupported", "unsupported_evidence"),
    ],
)
def test_calibration_analysts_fail_exactly_as_designed(
    pytester: pytest.Pytester, analyst: str, answerable_outcome: str
) -> None:
    select = "development and (level1 or level2 or level3)"
    result, records = run_bench(pytester, "--analyst", analyst, select=select)
    chosen = {r["scenario_id"]: r for r in records}
    outcomes = outcomes_by_case(records)
    answerable = [c for c in ANSWERABLE if c in chosen]
    assert answerable
    assert {outcomes[c] for c in answerable} == {answerable_outcome}
    assert all(outcomes[c] == "pass" for c in UNANSWERABLE if c in chosen)
    result.stdout.fnmatch_lines([f"*outcome: {answerable_outcome}*", "*question:*"])


def test_xdist_collects_the_same_items_with_the_same_outcomes(pytester: pytest.Pytester) -> None:
    select = "development and (level1 or level2)"
    _, serial_records = run_bench(
        pytester, "--analyst", "perturbed", run_id="serial", select=select
    )
    _, parallel_records = run_bench(
        pytester, "--analyst", "perturbed", "-n", "2", run_id="parallel", select=select
    )
    key = [(r["nodeid"], r["outcome"]) for r in serial_records]
    assert key == [(r["nodeid"], r["outcome"]) for r in parallel_records]
    assert {r["worker"] for r in parallel_records} == {"gw0", "gw1"}


def test_trials_multiply_items_with_stable_ids(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(
        str(DEFINITIONS_DIR), "-m", SELECTION, "--trials", "2", "--collect-only", "-q"
    )
    ids = [line for line in result.stdout.lines if "::" in line]
    assert len(ids) == 2 * len(SCENARIOS)
    assert len(set(ids)) == len(ids), "every trial has its own node id"
    assert ids == sorted(ids, key=lambda i: (i.split("::")[0], i))


def test_a_bad_scenario_file_fails_collection_naming_file_and_line(
    pytester: pytest.Pytester,
) -> None:
    good = next(iter(SCENARIOS.values()))[0].read_text()
    bad = pytester.path / "bad.scenario.yaml"
    bad.write_text(good.replace("version: 1", "version: 1\nweight: heavy"))
    result = pytester.runpytest_subprocess(str(bad))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([f"*{bad}:*: weight: unknown field; allowed:*"])


def test_reserved_scenarios_do_not_run_without_freeze(pytester: pytest.Pytester) -> None:
    path, _ = next(iter(SCENARIOS.values()))
    reserved = pytester.path / "reserved.scenario.yaml"
    reserved.write_text(path.read_text().replace("split: development", "split: reserved"))
    result = pytester.runpytest_subprocess(str(reserved), "-m", "reserved", "-rs")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*1 reserved item(s)*run only in a frozen run*add --freeze*"])


def test_an_unknown_analyst_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(str(DEFINITIONS_DIR), "--analyst", "nope.mod:make")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--analyst 'nope.mod:make': cannot load*"])


def test_records_are_kept_per_trial_for_audit(pytester: pytest.Pytester) -> None:
    _, records = run_bench(pytester, "-k", "level1")
    assert records
    for record in records:
        assert record["analyst"] == {"name": "reference", "kind": "calibration"}
        assert record["store"].startswith("sqlite:bi_")
        assert record["scenario_id"] not in record["store"]
        assert record["fingerprint_before"] == record["fingerprint_after"]
        assert record["messages"], "the message history is recorded"
        if record["answerable"]:
            assert all(ev["reproduced"] for ev in record["evidence"])
