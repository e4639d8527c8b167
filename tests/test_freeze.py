"""Frozen acceptance runs through pytester: the sealed reserved suite, its secret and
commitment, no silent skip, a clean candidate inside the worker allowlist, declared repeats.

Every test uses its own temporary secret and commitment (never the evaluator's)."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_backintel.collect.loading import DEFINITIONS_DIR
from pytest_backintel.freeze.allowlist import ALLOWLIST_FILE
from scenarios.acceptance.manifest import load_manifest
from scenarios.acceptance.sealing import SECRET_ENV, SECRET_FILE_ENV, draw_secret, issue
from scenarios.worlds import REPO_ROOT

COMMITMENT = "suite/reserved.commitment.json"
SCENARIO = "scenarios/l1.scenario.yaml"


@pytest.fixture(scope="module")
def secret(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A test-only secret whose reserved variant repeats no development value."""
    return draw_secret(load_manifest("development"), tmp_path_factory.mktemp("draw"))


def _git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True
    )


@pytest.fixture
def candidate(
    pytester: pytest.Pytester,
    secret: str,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> Path:
    """A clean git checkout with the sealed reserved suite, a scenario file and the allowlist;
    the secret in a file outside it, the data dir elsewhere."""
    outside = tmp_path_factory.mktemp("evaluator")
    (outside / "secret").write_text(secret + "\n")
    monkeypatch.setenv(SECRET_FILE_ENV, str(outside / "secret"))
    monkeypatch.delenv(SECRET_ENV, raising=False)
    monkeypatch.setenv("BACKINTEL_DATA_DIR", str(outside / "data"))
    root = pytester.path
    (root / "suite").mkdir()
    issue(secret.encode(), outside / "scratch", root / COMMITMENT)
    (root / "scenarios").mkdir()
    shutil.copy(DEFINITIONS_DIR / "level1" / "l1-item-grain.scenario.yaml", root / SCENARIO)
    shutil.copy(REPO_ROOT / ALLOWLIST_FILE, root / ALLOWLIST_FILE)
    pytester.makeini("[pytest]\nbackintel_manifests = suite/*.json\n")
    (root / ".gitignore").write_text("results/\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "candidate")
    return root


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


@pytest.mark.parametrize(
    "selection",
    [
        ("-m", "reserved"),
        ("-k", "acc-res-signed-revenue"),
        (f"{COMMITMENT}::acc-res-zero-profit[t1]",),
        (COMMITMENT,),
    ],
)
def test_selecting_reserved_items_without_freeze_is_a_usage_error_naming_freeze(
    pytester: pytest.Pytester, candidate: Path, selection: tuple[str, ...]
) -> None:
    result = run(pytester, *selection)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*reserved item(s)*run only in a frozen run*add --freeze*"])
    assert "skipped" not in result.stdout.str()


def test_under_xdist_each_selected_reserved_item_fails_naming_freeze_and_none_runs(
    pytester: pytest.Pytester, candidate: Path
) -> None:
    result = run(pytester, "-m", "reserved", "-n", "2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=17)
    result.stdout.fnmatch_lines(
        ["acc-res-signed-revenue?t1?: reserved cases run only*add --freeze*"]
    )
    assert not (candidate / "results").exists() or not list(
        (candidate / "results").rglob("records.jsonl")
    )


def test_a_plain_run_deselects_reserved_items_with_one_line(
    pytester: pytest.Pytester, candidate: Path
) -> None:
    result = run(pytester, "suite")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(["*17 deselected*"])
    notes = [line for line in result.stdout.lines if "reserved item(s) deselected" in line]
    assert notes == [
        "backintel: 17 reserved item(s) deselected: they run only with --freeze, as a whole "
        "suite (pytest -m reserved --freeze)"
    ]
    assert "skipped" not in result.stdout.str()


def test_a_frozen_run_unseals_the_17_cases_records_the_commitment_and_sets_the_baseline(
    pytester: pytest.Pytester, candidate: Path
) -> None:
    result = run(pytester, "-m", "reserved", "--freeze", "--run-id", "first")
    result.assert_outcomes(passed=17)
    committed = json.loads((candidate / COMMITMENT).read_text())
    lock = json.loads((candidate / "results" / "first" / "freeze.lock.json").read_text())
    assert len(lock["plan_items"]) == 17
    assert lock["candidate"]["git_sha"]
    [sealed] = lock["sealed"]
    assert sealed["verified"] is True
    assert sealed["cases"] == 17
    assert sealed["secret_id"] == committed["sealed"]["secret_id"]
    assert sealed["manifest_sha256"] == committed["sealed"]["manifest_sha256"]
    assert str(candidate / COMMITMENT) in lock["manifests"]
    run_json = json.loads((candidate / "results" / "first" / "run.json").read_text())
    assert run_json["freeze_check"]["manifests_unchanged"] is True
    assert run_json["outcomes"] == {"pass": 17}
    registry = (candidate / "results" / "frozen-runs.jsonl").read_text().splitlines()
    assert len(registry) == 1
    assert json.loads(registry[0])["worker_diff"]["allowlist_sha256"]

    again = run(pytester, "-m", "reserved", "--freeze", "--run-id", "second")
    assert again.ret == pytest.ExitCode.USAGE_ERROR
    again.stderr.fnmatch_lines(["*already has frozen run(s) first*--freeze-plan*"])

    planned = run(
        pytester, "-m", "reserved", "--freeze", "--run-id", "second", "--freeze-plan", "k=2"
    )
    planned.assert_outcomes(passed=17)
    registry = (candidate / "results" / "frozen-runs.jsonl").read_text().splitlines()
    assert [json.loads(line)["run_id"] for line in registry] == ["first", "second"]
    assert json.loads(registry[1])["repeat_of"] == ["first"]

    # A candidate commit that edits a scenario file, checked against the last frozen baseline.
    with (candidate / SCENARIO).open("a") as fh:
        fh.write("# tuned\n")
    _git(candidate, "commit", "-qam", "tune a scenario")
    tuned = run(pytester, "-m", "reserved", "--freeze", "--run-id", "tuned")
    assert tuned.ret == pytest.ExitCode.USAGE_ERROR
    tuned.stderr.fnmatch_lines(
        [f"*changes 1 path(s) outside the worker allowlist*since the frozen baseline*: {SCENARIO}*"]
    )
    assert not (candidate / "results" / "tuned" / "freeze.lock.json").exists()


def test_without_the_secret_a_frozen_run_is_refused_saying_what_is_missing(
    pytester: pytest.Pytester, candidate: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SECRET_FILE_ENV)
    result = run(pytester, "-m", "reserved", "--freeze")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*reserved suite acceptance-v1 is sealed*Set {SECRET_ENV}*or {SECRET_FILE_ENV}*"]
    )


def test_under_xdist_a_refused_frozen_run_fails_every_item_with_the_reason(
    pytester: pytest.Pytester, candidate: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SECRET_FILE_ENV)
    result = run(pytester, "-m", "reserved", "--freeze", "-n", "2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=17)
    result.stdout.fnmatch_lines([f"acc-res-zero-profit?t1?: *is sealed*Set {SECRET_ENV}*"])


def test_a_different_secret_fails_the_commitment_check_loudly(
    pytester: pytest.Pytester, candidate: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_ENV, "f" * 64)
    result = run(pytester, "-m", "reserved", "--freeze")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*the secret set (id *) is not the one this commitment*"])


def test_a_frozen_run_takes_the_reserved_suite_whole(
    pytester: pytest.Pytester, candidate: Path
) -> None:
    result = run(pytester, "-m", "reserved", "--freeze", "-k", "acc-res-signed-revenue")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*takes the reserved suite*whole*leaves out 16 case(s)*"])


def test_a_frozen_run_needs_a_clean_tree(pytester: pytest.Pytester, candidate: Path) -> None:
    (candidate / COMMITMENT).write_text((candidate / COMMITMENT).read_text() + "\n")
    result = run(pytester, "-m", "reserved", "--freeze")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--freeze needs a clean work tree*"])


def test_a_run_refused_before_locking_its_plan_does_not_count_as_a_frozen_run(
    tmp_path: Path,
) -> None:
    from pytest_backintel.freeze.allowlist import last_frozen_sha
    from pytest_backintel.freeze.lock import FreezeError, register_run

    candidate = {"git_sha": "a" * 40}
    register_run(tmp_path, "refused", candidate, None)
    assert last_frozen_sha(tmp_path) is None
    register_run(tmp_path, "ran", candidate, None)  # no plan needed: nothing ran before
    (tmp_path / "ran").mkdir()
    (tmp_path / "ran" / "freeze.lock.json").write_text("{}")
    assert last_frozen_sha(tmp_path) == "a" * 40
    with pytest.raises(FreezeError, match="already has frozen run"):
        register_run(tmp_path, "again", candidate, None)


def test_frozen_shards_are_parts_of_one_run_merged_and_resumed_only_under_their_lock(
    pytester: pytest.Pytester, candidate: Path
) -> None:
    from pytest_backintel.run.merge import merge_runs

    results = candidate / "results"
    for index, passed in ((1, 9), (2, 8)):
        shard = run(pytester, "-m", "reserved", "--freeze", "--shard", f"{index}/2")
        shard.assert_outcomes(passed=passed)
    registry = [json.loads(line) for line in (results / "frozen-runs.jsonl").open()]
    assert [(e["shard"], e["repeat_of"]) for e in registry] == [("1/2", []), ("2/2", [])]
    first, second = (results / e["run_id"] for e in registry)
    for part in (first, second):  # each lock holds the whole reserved plan
        assert len(json.loads((part / "freeze.lock.json").read_text())["plan_items"]) == 17
    again = run(pytester, "-m", "reserved", "--freeze", "--shard", "1/2")
    assert again.ret == pytest.ExitCode.USAGE_ERROR, "the same shard again is a repeat"
    again.stderr.fnmatch_lines([f"*already has frozen run(s) {first.name}*--freeze-plan*"])

    merged = merge_runs(results / "merged", [first, second])
    assert (merged.records, merged.missing) == (17, [])
    assert (results / "merged" / "freeze.lock.json").is_file()

    plain = run(pytester, "-m", "reserved", "--resume", first.name)
    assert plain.ret == pytest.ExitCode.USAGE_ERROR
    plain.stderr.fnmatch_lines(["*the run is frozen (freeze.lock.json): resume it with --freeze*"])
    same = run(pytester, "-m", "reserved", "--freeze", "--resume", first.name)
    assert same.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    same.stdout.fnmatch_lines(["*nothing to run, every planned trial has a final record*"])
    (candidate / "NOTES.md").write_text("another candidate\n")
    _git(candidate, "add", "NOTES.md")
    _git(candidate, "commit", "-qm", "another candidate")
    moved = run(pytester, "-m", "reserved", "--freeze", "--resume", first.name)
    assert moved.ret == pytest.ExitCode.USAGE_ERROR
    moved.stderr.fnmatch_lines(["*the freeze lock is for candidate *, this session is candidate*"])
