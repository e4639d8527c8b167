"""The worker allowlist: glob matching, the committed file, and `backintel freeze check`."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_backintel.cli.commands import main
from pytest_backintel.freeze.allowlist import (
    ALLOWLIST_FILE,
    AllowlistError,
    check_worker_diff,
    glob_match,
    load_allowlist,
)
from scenarios.worlds import REPO_ROOT


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("analyst/skills/**", "analyst/skills/refusals.md", True),
        ("analyst/skills/**", "analyst/skills/new/deep.md", True),
        ("analyst/skills/**", "analyst/skillset.md", False),
        ("analyst/*.py", "analyst/tools.py", True),
        ("analyst/*.py", "analyst/sub/tools.py", False),
        ("docs/**/*.md", "docs/acceptance.md", True),
        ("docs/**/*.md", "docs/a/b.md", True),
        ("analyst/agent.py", "analyst/agent.pyc", False),
        ("a?c", "abc", True),
        ("a?c", "a/c", False),
    ],
)
def test_glob_match(pattern: str, path: str, expected: bool) -> None:
    assert glob_match(pattern, path) is expected


def test_the_committed_allowlist_lets_a_worker_edit_the_analyst_and_nothing_it_is_judged_by() -> (
    None
):
    allowlist = load_allowlist(REPO_ROOT)
    assert allowlist is not None
    for path in ("analyst/prompts/system.md", "analyst/skills/refusals.md", "analyst/tools.py"):
        assert allowlist.may_edit(path), path
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    judged = [
        p
        for p in tracked
        if p.startswith(("scenarios/", "pytest_backintel/", "stores/", "reports/", "tests/"))
        or p in (ALLOWLIST_FILE, "pyproject.toml", "uv.lock", "conftest.py")
        or p.startswith("analyst/calibration")
    ]
    assert len(judged) > 50
    assert [p for p in judged if allowlist.may_edit(p)] == []
    assert allowlist.may_read("scenarios/acceptance/acceptance-v1/development.json")
    assert not allowlist.may_read("scenarios/acceptance/acceptance-v1/reserved.commitment.json")
    assert not allowlist.may_read("data/acceptance/reserved/manifest.json")
    assert not allowlist.may_read("results/run/records.jsonl")


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with the allowlist, an analyst prompt and a scenario; HEAD is frozen."""
    shutil.copy(REPO_ROOT / ALLOWLIST_FILE, tmp_path / ALLOWLIST_FILE)
    (tmp_path / ".gitignore").write_text("results/\n")
    for rel in ("analyst/prompts/system.md", "scenarios/definitions/l1.scenario.yaml"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("v1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "baseline")
    results = tmp_path / "results"
    results.mkdir()
    entry = {"run_id": "r1", "candidate": {"git_sha": _git(tmp_path, "rev-parse", "HEAD")}}
    (results / "frozen-runs.jsonl").write_text(json.dumps(entry) + "\n")
    (results / "r1").mkdir()
    (results / "r1" / "freeze.lock.json").write_text("{}")
    return tmp_path


def _commit(repo: Path, rel: str, text: str = "v2\n") -> None:
    (repo / rel).parent.mkdir(parents=True, exist_ok=True)
    (repo / rel).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", f"edit {rel}")


def test_a_candidate_editing_only_the_prompt_passes(repo: Path) -> None:
    _commit(repo, "analyst/prompts/system.md")
    _commit(repo, "analyst/skills/new-skill.md")
    done = check_worker_diff(repo, repo / "results")
    assert done["changed"] == ["analyst/prompts/system.md", "analyst/skills/new-skill.md"]
    assert done["baseline"] != done["candidate"]


@pytest.mark.parametrize(
    "rel",
    [
        "scenarios/definitions/l1.scenario.yaml",
        "scenarios/acceptance/acceptance-v1/reserved.commitment.json",
        "pytest_backintel/scoring/score.py",
        ALLOWLIST_FILE,
    ],
)
def test_a_candidate_editing_outside_the_allowlist_is_refused_naming_the_path(
    repo: Path, rel: str
) -> None:
    _commit(repo, "analyst/prompts/system.md")
    _commit(repo, rel, "tuned\n")
    with pytest.raises(AllowlistError, match=r"changes 1 path\(s\) outside") as info:
        check_worker_diff(repo, repo / "results")
    assert str(info.value).split("baseline", 1)[1].split(". ")[0].endswith(f": {rel}")


def test_a_renamed_file_names_both_paths(repo: Path) -> None:
    _git(repo, "mv", "scenarios/definitions/l1.scenario.yaml", "analyst/prompts/moved.md")
    _git(repo, "commit", "-qm", "move")
    with pytest.raises(AllowlistError) as info:
        check_worker_diff(repo, repo / "results")
    assert "scenarios/definitions/l1.scenario.yaml" in str(info.value)


def test_an_explicit_baseline_overrides_the_last_frozen_run(repo: Path) -> None:
    _commit(repo, "scenarios/definitions/l1.scenario.yaml")  # the evaluator's own change
    evaluator = _git(repo, "rev-parse", "HEAD")
    _commit(repo, "analyst/tools.py")
    with pytest.raises(AllowlistError):
        check_worker_diff(repo, repo / "results")
    assert check_worker_diff(repo, repo / "results", evaluator)["changed"] == ["analyst/tools.py"]
    with pytest.raises(AllowlistError, match="--freeze-baseline 'nope' is not a commit"):
        check_worker_diff(repo, repo / "results", "nope")


def test_freeze_check_command(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(repo)
    _commit(repo, "analyst/prompts/system.md")
    assert main(["freeze", "check"]) == 0
    assert "1 changed path(s), all inside worker-allowlist.toml [edit]" in capsys.readouterr().out
    _commit(repo, "scenarios/definitions/l1.scenario.yaml")
    assert main(["freeze", "check"]) == 1
    err = capsys.readouterr().err
    assert "outside the worker allowlist" in err
    assert "scenarios/definitions/l1.scenario.yaml" in err
    (repo / "results" / "frozen-runs.jsonl").unlink()
    assert main(["freeze", "check"]) == 0
    assert "no frozen baseline yet" in capsys.readouterr().out


def test_a_malformed_allowlist_is_named(repo: Path) -> None:
    (repo / ALLOWLIST_FILE).write_text("[edit]\npaths = 'analyst'\n[read]\npaths = []\n")
    with pytest.raises(AllowlistError, match=r"worker-allowlist.toml: \[edit\] paths must be"):
        load_allowlist(repo)
