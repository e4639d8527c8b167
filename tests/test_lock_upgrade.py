"""A lock file written by the previous release survives an upgrade that changed the data
fingerprint: verified by the old method where the harness still has it, else refused as a
change of the harness (never "data changed"), and `references build --check-upgrade` shows per
scenario `unchanged` or `changed old -> new`."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from test_own_data import backintel, project, pytest_run
from test_own_data_tutorial import ANSWERABLE

from stores.common.fingerprint_methods import current_method
from stores.sqlite.fingerprint import sqlite_logical_fingerprint


def _lock(folder: Path) -> Path:
    return folder / "scenarios" / "backintel.lock.json"


def _as_previous_release(folder: Path) -> dict[str, Any]:
    """The lock as the release before the one-pass SQLite summary wrote it: format 1, no
    method named, the data hash by sorted rows."""
    con = sqlite3.connect(folder / "shop.sqlite")
    try:
        previous = sqlite_logical_fingerprint(con)
    finally:
        con.close()
    doc = json.loads(_lock(folder).read_text())
    doc["format"] = 1
    for entry in doc["scenarios"].values():
        entry.pop("fingerprint")
        entry["data_hash"] = previous
    _lock(folder).write_text(json.dumps(doc, indent=2))
    return doc


def test_a_previous_release_lock_on_unchanged_data_is_verified_and_upgrades_unchanged(
    tmp_path: Path,
) -> None:
    folder = project(tmp_path)
    assert backintel(folder, "references", "build").returncode == 0
    built = json.loads(_lock(folder).read_text())
    assert built["format"] == 2
    assert {e["fingerprint"] for e in built["scenarios"].values()} == {current_method("sqlite")}
    old = _as_previous_release(folder)
    assert {e["data_hash"] for e in old["scenarios"].values()} != {
        e["data_hash"] for e in built["scenarios"].values()
    }  # the methods differ on the same data

    checked = backintel(folder, "validate", "scenarios")  # verified by the old method
    assert checked.returncode == 0, checked.stderr
    run = pytest_run(folder, "-k", "delivered-orders", "--run-id", "old-lock")
    assert run.returncode == 0, run.stdout + run.stderr
    record = json.loads(
        (folder / "results" / "old-lock" / "records.jsonl").read_text().split("\n")[0]
    )
    assert record["data_hash_method"] == current_method("sqlite")
    head = json.loads((folder / "results" / "old-lock" / "run.json").read_text())
    assert head["stores_used"] == ["sqlite"]
    assert head["data_hash_methods"] == {record["world"]: current_method("sqlite")}

    upgrade = backintel(folder, "references", "build", "--check-upgrade")
    assert upgrade.returncode == 0, upgrade.stderr
    for case in ANSWERABLE:
        assert f"backintel.lock.json: {case}: unchanged" in upgrade.stdout, upgrade.stdout
    assert "changed" not in upgrade.stdout.replace("unchanged", "")
    assert json.loads(_lock(folder).read_text()) == built  # the rebuilt lock is the new one


def test_a_method_the_harness_no_longer_has_is_refused_as_the_harness_changing(
    tmp_path: Path,
) -> None:
    folder = project(tmp_path)
    assert backintel(folder, "references", "build").returncode == 0
    doc = json.loads(_lock(folder).read_text())
    for entry in doc["scenarios"].values():
        entry["fingerprint"] = "sqlite-retired-v0"
        entry["data_hash"] = "ab" * 32
    _lock(folder).write_text(json.dumps(doc))
    run = pytest_run(folder, "--run-id", "retired")
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    for case in ANSWERABLE:
        line = next(ln for ln in run.stderr.splitlines() if f"scenario '{case}'" in ln)
        assert "fingerprint method this harness no longer has (sqlite-retired-v0" in line
        assert "the harness changed how it fingerprints data" in line
        assert "backintel references build --check-upgrade" in line
        assert "computed on data" not in line
    upgrade = backintel(folder, "references", "build", "--check-upgrade")
    assert upgrade.returncode == 0, upgrade.stderr
    ours = [ln for ln in upgrade.stdout.splitlines() if ln.startswith(str(_lock(folder)))]
    assert sorted(ours) == sorted(f"{_lock(folder)}: {c}: unchanged" for c in ANSWERABLE)


def test_changed_data_under_an_old_lock_is_named_per_scenario(tmp_path: Path) -> None:
    folder = project(tmp_path)
    assert backintel(folder, "references", "build").returncode == 0
    _as_previous_release(folder)
    con = sqlite3.connect(folder / "shop.sqlite")
    con.execute("UPDATE orders SET status = 'delivered' WHERE id = 3")
    con.commit()
    con.close()
    checked = backintel(folder, "validate", "scenarios")
    assert checked.returncode == 1
    assert "but this run's data is" in checked.stderr  # every method it had says: other data
    assert "no longer has" not in checked.stderr
    upgrade = backintel(folder, "references", "build", "--check-upgrade")
    assert upgrade.returncode == 1
    lines = upgrade.stdout.splitlines()
    assert any(ln.endswith("delivered-orders: changed delivered_orders: 4 -> 5") for ln in lines), (
        upgrade.stdout
    )
    assert any(
        ln.endswith("delivered-revenue: changed delivered_revenue: 126.0 -> 168.0") for ln in lines
    )
    assert any(ln.endswith("german-customers: unchanged") for ln in lines), upgrade.stdout
    assert "reference value changed:" in upgrade.stderr
    assert "delivered-orders" in upgrade.stderr
