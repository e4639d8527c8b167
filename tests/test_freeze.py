"""Frozen acceptance runs through pytester: clean candidate, whole suite, declared repeats."""

import json
import subprocess
from pathlib import Path

import pytest

from scenarios.acceptance.manifest import MANIFEST_DIR

RESERVED = json.loads((MANIFEST_DIR / "acceptance.json").read_text())


@pytest.fixture
def candidate(pytester: pytest.Pytester) -> Path:
    """A clean git checkout holding a two-case reserved suite."""
    manifest = dict(RESERVED, cases=RESERVED["cases"][:2])
    (pytester.path / "suite").mkdir()
    (pytester.path / "suite" / "reserved.json").write_text(json.dumps(manifest))
    pytester.makeini("[pytest]\nbackintel_manifests = suite/*.json\n")
    (pytester.path / ".gitignore").write_text("results/\n")
    for cmd in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "candidate"],
    ):
        subprocess.run(["git", *cmd], cwd=pytester.path, check=True)
    return pytester.path


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-m", "reserved", "-p", "no:cacheprovider", *args)


def test_reserved_cases_skip_without_freeze(pytester: pytest.Pytester, candidate: Path) -> None:
    run(pytester).assert_outcomes(skipped=2)


def test_a_frozen_run_locks_its_plan_and_registers_the_candidate(
    pytester: pytest.Pytester, candidate: Path
) -> None:
    result = run(pytester, "--freeze", "--run-id", "first")
    result.assert_outcomes(passed=2)
    lock = json.loads((candidate / "results" / "first" / "freeze.lock.json").read_text())
    assert len(lock["plan_items"]) == 2
    assert lock["candidate"]["git_sha"]
    run_json = json.loads((candidate / "results" / "first" / "run.json").read_text())
    assert run_json["freeze_check"]["manifests_unchanged"] is True
    registry = (candidate / "results" / "frozen-runs.jsonl").read_text().splitlines()
    assert len(registry) == 1

    again = run(pytester, "--freeze", "--run-id", "second")
    assert again.ret == pytest.ExitCode.USAGE_ERROR
    again.stderr.fnmatch_lines(["*already has frozen run(s) first*--freeze-plan*"])

    planned = run(pytester, "--freeze", "--run-id", "second", "--freeze-plan", "k=3 repeat")
    planned.assert_outcomes(passed=2)
    registry = (candidate / "results" / "frozen-runs.jsonl").read_text().splitlines()
    assert [json.loads(line)["run_id"] for line in registry] == ["first", "second"]
    assert json.loads(registry[1])["repeat_of"] == ["first"]


def test_a_frozen_run_takes_the_reserved_suite_whole(
    pytester: pytest.Pytester, candidate: Path
) -> None:
    first_case = RESERVED["cases"][0]["scenario"]["id"]
    result = run(pytester, "--freeze", "-k", first_case)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*takes the reserved suite*whole*leaves out 1 case(s)*"])


def test_a_frozen_run_needs_a_clean_tree(pytester: pytest.Pytester, candidate: Path) -> None:
    (candidate / "suite" / "reserved.json").write_text(
        (candidate / "suite" / "reserved.json").read_text() + "\n"
    )
    result = run(pytester, "--freeze")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--freeze needs a clean work tree*"])
