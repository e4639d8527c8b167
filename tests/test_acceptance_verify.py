"""Fixture verification, the acceptance world, and the original-regression manifest."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_backintel.scenario import Scenario, Split
from scenarios.acceptance import (
    AcceptanceDataError,
    AcceptanceSettings,
    Manifest,
    build_acceptance,
    load_manifest,
    verify_acceptance_data,
)
from scenarios.acceptance.checks import AcceptanceBuildError
from scenarios.acceptance.regression import (
    REFERENCES,
    RegressionDataError,
    build_regression,
    load_regression,
    to_json,
    verify_regression_data,
)
from scenarios.acceptance.sealing import SECRET_ENV, issue
from scenarios.acceptance.world import AcceptanceWorld
from stores.sqlite.store import SQLiteStore

TEST_SECRET = b"test-only secret, not the evaluator's: 0001"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Manifest]:
    data_dir = tmp_path_factory.mktemp("pristine")
    return data_dir, build_acceptance(AcceptanceSettings(data_dir), "development")


@pytest.fixture
def copy(pristine: tuple[Path, Manifest], tmp_path: Path) -> tuple[AcceptanceSettings, Manifest]:
    shutil.copytree(pristine[0] / "acceptance", tmp_path / "acceptance")
    return AcceptanceSettings(tmp_path), pristine[1]


def _file(settings_: AcceptanceSettings, manifest: Manifest, key: str) -> Path:
    return settings_.data_dir / manifest.case(f"development-{key}").store.file


def test_unchanged_files_pass(copy: tuple[AcceptanceSettings, Manifest]) -> None:
    settings_, manifest = copy
    verify_acceptance_data(manifest, settings_)
    verify_acceptance_data("development", settings_)  # the committed manifest, by split name


def test_a_changed_row_is_a_logical_and_physical_change(
    copy: tuple[AcceptanceSettings, Manifest],
) -> None:
    settings_, manifest = copy
    path = _file(settings_, manifest, "zero-profit")
    conn = sqlite3.connect(path)
    conn.execute("UPDATE expense_postings SET amount = amount + 0.01 WHERE rowid = 1")
    conn.commit()
    conn.close()
    with pytest.raises(AcceptanceDataError) as err:
        verify_acceptance_data(manifest, settings_)
    message = str(err.value)
    assert str(path) in message
    assert "acc-dev-zero-profit" in message
    assert "logical checksum changed" in message
    assert "physical checksum changed" in message
    assert message.count(str(settings_.data_dir)) == 2  # only that file is reported


def test_a_changed_header_byte_is_a_physical_change_only(
    copy: tuple[AcceptanceSettings, Manifest],
) -> None:
    settings_, manifest = copy
    path = _file(settings_, manifest, "signed-revenue")
    data = bytearray(path.read_bytes())
    data[68] ^= 0x01  # the application id: no table, schema or row changes
    path.write_bytes(bytes(data))
    with pytest.raises(AcceptanceDataError, match="physical checksum changed") as err:
        verify_acceptance_data(manifest, settings_)
    assert "logical checksum changed" not in str(err.value)


def test_a_missing_file_is_reported(copy: tuple[AcceptanceSettings, Manifest]) -> None:
    settings_, manifest = copy
    path = _file(settings_, manifest, "causal-review")
    path.unlink()
    with pytest.raises(AcceptanceDataError, match=rf"{path}.*file is missing"):
        verify_acceptance_data(manifest, settings_)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(fraction=st.floats(0, 1, exclude_max=True), bit=st.integers(0, 7))
def test_any_flipped_bit_is_detected(
    pristine: tuple[Path, Manifest], tmp_path: Path, fraction: float, bit: int
) -> None:
    data_dir, manifest = pristine
    case = manifest.case("development-delivery-review-report")
    target = tmp_path / f"{fraction}-{bit}" / case.store.file
    target.parent.mkdir(parents=True, exist_ok=True)  # hypothesis may replay an example
    shutil.copyfile(data_dir / case.store.file, target)
    data = bytearray(target.read_bytes())
    data[int(fraction * len(data))] ^= 1 << bit
    target.write_bytes(bytes(data))
    single = Manifest(manifest.suite, manifest.split, manifest.seed, 1, (case,))
    with pytest.raises(AcceptanceDataError, match=r"physical checksum changed|not a readable"):
        verify_acceptance_data(single, AcceptanceSettings(tmp_path / f"{fraction}-{bit}"))


def test_world_serves_the_unsealed_reserved_store_and_only_after_unsealing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = AcceptanceWorld()
    assert len(world.snapshots) == 34
    with pytest.raises(AcceptanceBuildError, match="sealed and not unsealed"):
        world.ensure_built(tmp_path, "reserved-complete-ledger")
    with pytest.raises(ValueError, match="sealed"):
        load_manifest("reserved")
    commitment = tmp_path / "reserved.commitment.json"
    issue(TEST_SECRET, tmp_path / "scratch", commitment)
    monkeypatch.setenv(SECRET_ENV, TEST_SECRET.decode())
    path, record = world.unseal(commitment, tmp_path)
    assert record["cases"] == 17
    files = world.ensure_built(tmp_path, "reserved-complete-ledger")
    case = load_manifest(path).case("reserved-complete-ledger")
    assert files.sqlite_path == tmp_path / case.store.file
    assert files.tables == list(case.store.tables)
    assert world.data_hash(files) == case.store.logical_sha256
    verify_acceptance_data(path, AcceptanceSettings(tmp_path))
    assert files.sqlite_path is not None
    files.sqlite_path.write_bytes(files.sqlite_path.read_bytes() + b"\0")
    with pytest.raises(AcceptanceBuildError, match="missing or changed since it was unsealed"):
        AcceptanceWorld().ensure_built(tmp_path, "reserved-complete-ledger")
    files.sqlite_path.write_bytes(files.sqlite_path.read_bytes()[:-1])
    store = SQLiteStore(tmp_path / "stores")
    store.setup_session()
    provisioned = store.provision(files)
    try:
        printed = provisioned.fingerprint()
        assert (printed.logical, printed.physical) == (
            case.store.logical_sha256,
            case.store.physical_sha256,
        )
        with provisioned.connect() as session:
            assert session.list_tables() == list(case.store.tables)
    finally:
        store.teardown_session()


def test_world_repairs_a_tampered_store(tmp_path: Path) -> None:
    world = AcceptanceWorld()
    files = world.ensure_built(tmp_path, "development-signed-revenue")
    assert files.sqlite_path is not None
    conn = sqlite3.connect(files.sqlite_path)
    conn.execute("DELETE FROM payment_events WHERE rowid = 1")
    conn.commit()
    conn.close()
    with pytest.raises(AcceptanceDataError):
        verify_acceptance_data("development", AcceptanceSettings(tmp_path))
    world.ensure_built(tmp_path, "development-signed-revenue")
    verify_acceptance_data("development", AcceptanceSettings(tmp_path))


def test_world_refuses_unknown_snapshots_and_a_foreign_seed(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'<split>-<case>'"):
        AcceptanceWorld().ensure_built(tmp_path, "base")
    with pytest.raises(KeyError, match="no case 'development-nope'"):
        AcceptanceWorld().ensure_built(tmp_path, "development-nope")
    with pytest.raises(AcceptanceBuildError, match="seed"):
        AcceptanceWorld(seed=1).ensure_built(tmp_path, "development-zero-profit")


# --- original regression -------------------------------------------------------------------
@pytest.fixture(scope="module")
def olist_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("olist")


def test_regression_manifest_is_reproduced_from_fresh_olist_data(olist_dir: Path) -> None:
    assert to_json(build_regression(olist_dir)) == to_json(load_regression())


def test_regression_manifest_shape() -> None:
    manifest = load_regression()
    cases = manifest["cases"]
    scenarios = [Scenario.model_validate(c["scenario"]) for c in cases]
    assert len(scenarios) == 6
    assert [c["role"] for c in cases].count("original") == 3
    assert {s.split for s in scenarios} == {Split.REGRESSION}
    assert all(c["trials"] == 2 for c in cases)
    assert all(s.dataset.world == "olist" and s.dataset.snapshot == "base" for s in scenarios)
    assert all(c["store"]["data_hash"] == manifest["binding"]["data_hash"] for c in cases)
    missing = next(s for s in scenarios if not s.answerable)
    assert missing.refusal is not None
    assert missing.refusal.forbidden_metric == "net_profit"
    assert sorted(REFERENCES) == sorted(s.id for s in scenarios if s.answerable)
    report = next(c for c in cases if c["scenario"]["id"] == "reg-delivery-report-2018-03")
    names = [m["name"] for m in report["scenario"]["metrics"]]
    assert len(names) == len(set(names)) == 5
    assert sorted(names) == sorted(report["reference"])


def test_regression_verification_detects_changed_olist_files(
    olist_dir: Path, tmp_path: Path
) -> None:
    manifest = load_regression()
    verify_regression_data(manifest, olist_dir)
    shutil.copytree(olist_dir / "worlds", tmp_path / "worlds")
    verify_regression_data(manifest, tmp_path)
    db = next(tmp_path.glob("worlds/olist-*/olist.sqlite"))
    data = bytearray(db.read_bytes())
    data[68] ^= 0x01
    db.write_bytes(bytes(data))
    with pytest.raises(RegressionDataError, match=r"olist\.sqlite: physical checksum changed"):
        verify_regression_data(manifest, tmp_path)
