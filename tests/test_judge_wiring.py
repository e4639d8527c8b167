"""`--judge-model` through the plugin: scores kept beside the outcome, labelled uncalibrated,
and a judge of the analyst's own family refused."""

import json

import pytest

from pytest_backintel.collect.loading import DEFINITIONS_DIR


def test_judge_scores_are_recorded_uncalibrated_and_leave_outcomes_alone(
    pytester: pytest.Pytester,
) -> None:
    results = pytester.path / "results"
    args = [str(DEFINITIONS_DIR / "level5"), "-m", "development", "--results-dir", str(results)]
    judged = pytester.runpytest_subprocess(
        *args, "--judge-model", "test", "--run-id", "judged", "--analyst", "perturbed"
    )
    plain = pytester.runpytest_subprocess(*args, "--run-id", "plain", "--analyst", "perturbed")
    judged_records = [json.loads(x) for x in (results / "judged" / "records.jsonl").open()]
    plain_records = [json.loads(x) for x in (results / "plain" / "records.jsonl").open()]
    assert judged_records
    assert [r["outcome"] for r in judged_records] == [r["outcome"] for r in plain_records]
    assert {r["outcome"] for r in judged_records} == {"wrong_value"}
    for record in judged_records:
        assert record["judge"]["calibrated"] is False
        assert record["judge"]["judge_model"] == "test"
    assert all(r["judge"] is None for r in plain_records)
    assert judged.ret == plain.ret == pytest.ExitCode.TESTS_FAILED


def test_a_judge_of_the_analysts_family_is_refused(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(
        str(DEFINITIONS_DIR / "level1"),
        "--model",
        "openai:gpt-5.1",
        "--judge-model",
        "openai:gpt-4o",
        "--collect-only",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--judge-model*"])
