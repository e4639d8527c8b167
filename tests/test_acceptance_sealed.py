"""The sealed reserved split: nothing of it in the repository, a commitment that binds it,
detection of a different secret or a changed generator, and rotation.

With the evaluator's secret set (BACKINTEL_RESERVED_SECRET or _FILE) the tree is searched for
the values it generates; otherwise for those of a test-only secret."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_backintel.cli.commands import main
from pytest_backintel.collect.sealed import SealedSuiteError
from pytest_backintel.scenario import Scenario, Split
from scenarios.acceptance import builder as builder_module
from scenarios.acceptance.manifest import Manifest, load_manifest
from scenarios.acceptance.model import Case, Variant
from scenarios.acceptance.sealing import (
    COMMITMENT_PATH,
    SECRET_ENV,
    SECRET_FILE_ENV,
    build_reserved,
    issue,
    read_secret,
    repeats,
    unseal,
)
from scenarios.acceptance.world import AcceptanceWorld
from scenarios.worlds import REPO_ROOT

TEST_SECRET = b"test-only secret, not the evaluator's: 0001"
EVALUATOR = bool(os.environ.get(SECRET_ENV) or os.environ.get(SECRET_FILE_ENV))


@pytest.fixture(scope="module")
def reserved(tmp_path_factory: pytest.TempPathFactory) -> Manifest:
    secret = read_secret() if EVALUATOR else TEST_SECRET
    return build_reserved(secret, tmp_path_factory.mktemp("reserved"))


def _distinctive(value: Any) -> list[str]:
    """The text forms of a value worth searching for (at least five significant digits)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return []
    forms = {json.dumps(value)} | (
        {f"{value:.6f}", f"{value:.2f}"} if isinstance(value, float) else set()
    )
    return sorted(f for f in forms if len(f.replace("-", "").replace(".", "").lstrip("0")) >= 5)


def reserved_values(manifest: Manifest) -> set[str]:
    """Every generated reference value, unseen event time and store name of the split."""
    out: set[str] = set()
    for case in manifest.cases:
        for value in case.reference.values():
            out.update(_distinctive(value))
        out.update(case.planting.get("unseen_event_times", {}).values())
        out.add(Path(case.store.file).stem)
    return out


def leaks(values: set[str], root: Path) -> dict[str, list[str]]:
    """Files of the repository (tracked or not ignored) containing any of `values`."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.decode()
    found: dict[str, list[str]] = {}
    for rel in filter(None, listed.split("\0")):
        path = root / rel
        if not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        hits = sorted(v for v in values if v in text)
        if hits:
            found[rel] = hits
    return found


def test_no_generated_reserved_value_appears_anywhere_in_the_repository(
    reserved: Manifest,
) -> None:
    values = reserved_values(reserved)
    assert len(values) > 60, sorted(values)
    assert leaks(values, REPO_ROOT) == {}


def test_the_leak_search_finds_a_planted_value(reserved: Manifest, tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    value = next(v for v in sorted(reserved_values(reserved)) if "." in v)
    (tmp_path / "notes.md").write_text(f"the answer is {value}\n")
    assert leaks(reserved_values(reserved), tmp_path) == {"notes.md": [value]}


def test_every_reserved_value_differs_from_development_unless_the_spec_fixes_it(
    reserved: Manifest,
) -> None:
    dev = load_manifest("development")
    assert repeats(dev, reserved) == []
    key = next(c for c in reserved.cases if c.id == "acc-res-repeat-purchasing-report")
    twin = dataclasses.replace(
        key,
        reference=key.reference
        | {"persons": dev.case("development-repeat-purchasing-report").reference["persons"]},
    )
    planted = dataclasses.replace(
        reserved, cases=tuple(twin if c.id == key.id else c for c in reserved.cases)
    )
    assert repeats(dev, planted) == [
        f"acc-res-repeat-purchasing-report.persons = {twin.reference['persons']!r}"
    ]


def test_the_commitment_holds_no_question_reference_or_query() -> None:
    data = json.loads(COMMITMENT_PATH.read_text())
    assert data["split"] == "reserved"
    assert {c["id"] for c in data["cases"]} == {
        c.id.replace("acc-dev-", "acc-res-") for c in load_manifest("development").cases
    }
    for case in data["cases"]:
        assert set(case) == {"id", "level", "family", "answerable", "commitment"}
    text = COMMITMENT_PATH.read_text()
    for word in ("question", "reference", "check_sql", "SELECT", "planting"):
        assert word not in text
    assert not (COMMITMENT_PATH.parent / "acceptance.json").exists()


@pytest.mark.skipif(
    not EVALUATOR, reason="needs the evaluator's secret (BACKINTEL_RESERVED_SECRET)"
)
def test_the_committed_commitment_is_the_one_of_the_evaluators_secret(tmp_path: Path) -> None:
    path, record = unseal(COMMITMENT_PATH, tmp_path)
    assert record["cases"] == 17
    assert load_manifest(path).split == "reserved"


def test_a_missing_or_different_secret_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commitment = tmp_path / "c.json"
    issue(TEST_SECRET, tmp_path / "scratch", commitment)
    monkeypatch.delenv(SECRET_ENV, raising=False)
    monkeypatch.delenv(SECRET_FILE_ENV, raising=False)
    with pytest.raises(SealedSuiteError, match=f"is sealed.*Set {SECRET_ENV}.*{SECRET_FILE_ENV}"):
        unseal(commitment, tmp_path)
    monkeypatch.setenv(SECRET_FILE_ENV, str(REPO_ROOT / "README.md"))
    with pytest.raises(SealedSuiteError, match="inside the repository"):
        unseal(commitment, tmp_path)
    monkeypatch.delenv(SECRET_FILE_ENV)
    monkeypatch.setenv(SECRET_ENV, "short")
    with pytest.raises(SealedSuiteError, match="at least 32"):
        unseal(commitment, tmp_path)
    with pytest.raises(SealedSuiteError, match=r"the secret set \(id \w+\) is not the one"):
        unseal(commitment, tmp_path, b"another test-only secret of enough length!!")
    path, record = unseal(commitment, tmp_path, TEST_SECRET)
    assert record["verified"]
    assert path.is_file()


def test_a_changed_generator_is_detected_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commitment = tmp_path / "c.json"
    issue(TEST_SECRET, tmp_path / "scratch", commitment)
    original = builder_module.CASE_BUILDERS[0]

    def tampered(v: Variant) -> list[Case]:
        return [dataclasses.replace(c, question=c.question + " (in full)") for c in original(v)]

    monkeypatch.setattr(
        builder_module, "CASE_BUILDERS", (tampered, *builder_module.CASE_BUILDERS[1:])
    )
    with pytest.raises(
        SealedSuiteError, match=r"generator changed.*acc-res-signed-revenue"
    ) as info:
        unseal(commitment, tmp_path, TEST_SECRET)
    assert "acc-res-zero-profit" not in str(info.value)


def test_rotation_retires_used_cases_to_regression_and_issues_a_new_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BACKINTEL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv(SECRET_ENV, TEST_SECRET.decode())
    suite = tmp_path / "acceptance-v1"
    suite.mkdir()
    (suite / "development.json").write_text(load_manifest("development").to_json())
    issue(TEST_SECRET, tmp_path / "scratch", suite / "reserved.commitment.json")
    before = json.loads((suite / "reserved.commitment.json").read_text())
    args = ["reserve", "rotate", "--commitment", str(suite / "reserved.commitment.json")]
    out = tmp_path / "new-secret"
    assert main([*args, "--secret-out", str(out), "--used", "acc-res-zero-profit"]) == 0
    assert "retired 1 case(s)" in capsys.readouterr().out
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    after = json.loads((suite / "reserved.commitment.json").read_text())
    assert after["sealed"]["rotation"] == before["sealed"]["rotation"] + 1
    assert after["sealed"]["secret_id"] != before["sealed"]["secret_id"]
    retired = json.loads((suite / "retired.json").read_text())
    [case] = retired["cases"]
    assert case["scenario"]["id"] == "acc-ret1-zero-profit"
    assert Scenario.model_validate(case["scenario"]).split is Split.REGRESSION
    files = AcceptanceWorld(manifest_dir=suite).ensure_built(
        tmp_path / "fresh", "retired1-zero-profit"
    )
    assert files.sqlite_path == tmp_path / "fresh" / case["store"]["file"]
    # the old secret no longer opens the suite; the new one does
    assert main(["reserve", "verify", "--commitment", str(suite / "reserved.commitment.json")]) == 1
    assert "is not the one this commitment was issued for" in capsys.readouterr().err
    monkeypatch.setenv(SECRET_ENV, out.read_text().strip())
    assert main(["reserve", "verify", "--commitment", str(suite / "reserved.commitment.json")]) == 0
    assert "17 cases match their commitments" in capsys.readouterr().out
    assert main([*args, "--secret-out", str(out)]) == 1
    assert "exists" in capsys.readouterr().err


def test_docs_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (REPO_ROOT / "docs" / "acceptance.md").read_text(encoding="utf-8")
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    exec(compile(block, "docs/acceptance.md", "exec"), namespace)
    assert namespace["manifest"].to_json() == load_manifest("development").to_json()
    assert len(list((tmp_path / "data" / "acceptance" / "development").glob("*.sqlite"))) == 17


def test_the_committed_commitment_is_the_evaluators_published_one() -> None:
    """Issue 29: the repository carries the evaluator's commitment, byte for byte where the
    published copy is beside the checkout, and never the secret."""
    data = json.loads(COMMITMENT_PATH.read_text())
    assert data["sealed"]["secret_id"] == "710abe1e8f2770a4"
    assert data["sealed"]["rotation"] == 1
    assert len(data["cases"]) == 17
    published = REPO_ROOT.parent / "shared" / "evaluator" / "reserved.commitment.json"
    if published.is_file():
        assert COMMITMENT_PATH.read_bytes() == published.read_bytes()


def test_a_generator_change_is_refused_then_reissued_for_the_same_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/acceptance.md: a deliberate generator change makes frozen runs refuse naming the
    cases; `backintel reserve commit` with the same secret re-issues the commitment, keeping
    the secret id and the rotation."""
    monkeypatch.setenv("BACKINTEL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv(SECRET_ENV, TEST_SECRET.decode())
    commitment = tmp_path / "reserved.commitment.json"
    issue(TEST_SECRET, tmp_path / "scratch", commitment)
    before = json.loads(commitment.read_text())
    changed = json.loads(commitment.read_text())  # as if the generator now made another case
    changed["cases"][0]["commitment"] = "0" * 64
    commitment.write_text(json.dumps(changed))
    verify = ["reserve", "verify", "--commitment", str(commitment)]
    assert main(verify) == 1
    assert changed["cases"][0]["id"] in capsys.readouterr().err
    assert main(["reserve", "commit", "--commitment", str(commitment)]) == 0
    after = json.loads(commitment.read_text())
    assert after == before
    assert after["sealed"]["secret_id"] == before["sealed"]["secret_id"]
    assert main(verify) == 0
    assert "17 cases match their commitments" in capsys.readouterr().out
