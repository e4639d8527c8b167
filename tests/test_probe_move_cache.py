"""The moving-probe search's result is kept on disk (`probe_move_cache`): a later session or
process builds only the winners, checks each still moves what it moved, and searches again over a
wrong entry; a seed file is read, never written; the unguarded message is the search's own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_own_data import backintel
from test_probe_moves import SCENARIOS, TRUTH, UNMOVED, project, score, write_sqlite

from pytest_backintel.collect.backends import backend_for, store_spec
from pytest_backintel.collect.loading import load_scenario_file
from pytest_backintel.evidence.probe import DataProbe
from pytest_backintel.evidence.probe_move_cache import MoveEntry, read_seed, render_seed
from pytest_backintel.evidence.probe_moves import SEARCHES, moving_probes, moving_salt
from pytest_backintel.run.hand_score import HandScorer
from pytest_backintel.scenario import Scenario


@pytest.fixture(scope="module")
def saas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A project of the top-plan and ratio-one scenarios over a SQLite file, references locked
    (its commands keep their data in `<project>/data`)."""
    tmp = tmp_path_factory.mktemp("moves")
    scenarios = {"top-plan": SCENARIOS["top-plan"], **UNMOVED}
    folder = project(tmp / "p", "{sqlite: ../saas.sqlite}", scenarios)
    write_sqlite(folder / "saas.sqlite")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("BACKINTEL_DATA_DIR", str(folder / "data"))
        build = backintel(folder, "references", "build")
        assert build.returncode == 0, build.stdout + build.stderr
        yield folder


def scenario_of(folder: Path, sid: str) -> Scenario:
    return load_scenario_file(folder / "scenarios" / f"{sid}.scenario.yaml")


def session(data: Path, scenario: Scenario, seed: Path | None = None) -> tuple[list[object], str]:
    """One scoring session's moving probes: their check values and the unguarded message."""
    scorer = HandScorer(data)
    try:
        files, data_hash = scorer.dataset(scenario)
        backend = backend_for(scorer.backends, scenario, "sqlite")
        args = (store_spec(scenario, "sqlite"), backend, files, None, data_hash, scenario)
        probes: list[DataProbe] = moving_probes(
            scorer.probes, *args, lambda: scorer.reference(scenario, None), seed
        )
        values = [p.check(scenario)[0] for p in probes]
        still = {w for p in probes if (w := p.still.get((scenario.id, scenario.version)))}
        return values, "".join(still)
    finally:
        scorer.close()


def entries(data: Path) -> list[Path]:
    return sorted((data / "perturbed" / "moving-probes").glob("*.json"))


def test_a_second_session_replays_the_result_without_searching(saas: Path, tmp_path: Path) -> None:
    top = scenario_of(saas, "top-plan")
    searched = len(SEARCHES)
    first, why = session(tmp_path / "data", top)
    assert len(SEARCHES) == searched + 1
    assert len(first) > 2
    assert why == ""
    [entry] = entries(tmp_path / "data")
    stored = entry.read_text()
    again, _ = session(tmp_path / "data", top)
    assert len(SEARCHES) == searched + 1, "the second session searched again"
    assert again == first
    assert entry.read_text() == stored


def test_a_tampered_entry_is_searched_again_and_overwritten(saas: Path, tmp_path: Path) -> None:
    top = scenario_of(saas, "top-plan")
    first, _ = session(tmp_path / "data", top)
    [entry] = entries(tmp_path / "data")
    good = json.loads(entry.read_text())
    for wrong in ([[12345, ["top_plan"]]], [[good["moves"][0][0], ["n"]]], []):
        entry.write_text(json.dumps({"moves": wrong, "unmoved": []}))
        searched = len(SEARCHES)
        again, why = session(tmp_path / "data", top)
        assert len(SEARCHES) == searched + 1, wrong
        assert again == first
        assert why == ""
        assert json.loads(entry.read_text()) == good


def test_the_unguarded_message_is_the_same_on_a_replay(saas: Path, tmp_path: Path) -> None:
    ratio = scenario_of(saas, "ratio-one")
    searched = len(SEARCHES)
    _, why = session(tmp_path / "data", ratio)
    assert "does not move under the probe: r keeps" in why
    assert "(2 usual, 8 searched)" in why
    _, replayed = session(tmp_path / "data", ratio)
    assert replayed == why
    assert len(SEARCHES) == searched + 1

    [entry] = entries(tmp_path / "data")
    good = entry.read_text()
    claim = {"moves": [[moving_salt(0, ()), ["r"]]], "unmoved": []}  # a salt it tries, but
    entry.write_text(json.dumps(claim))  # that copy gives 1 as well: only building it shows
    _, checked = session(tmp_path / "data", ratio)
    assert checked == why
    assert len(SEARCHES) == searched + 2
    assert entry.read_text() == good


def test_a_seed_is_read_checked_and_never_written(saas: Path, tmp_path: Path) -> None:
    top = scenario_of(saas, "top-plan")
    first, _ = session(tmp_path / "searched", top)
    [entry] = entries(tmp_path / "searched")
    key = entry.stem
    seed = tmp_path / "seed.moves.json"
    good = MoveEntry.from_json(json.loads(entry.read_text()))
    assert good is not None
    seed.write_text(render_seed({key: ("top-plan", good)}))
    searched = len(SEARCHES)
    assert session(tmp_path / "fresh", top, seed)[0] == first
    assert len(SEARCHES) == searched, "a fresh data dir with the seed searched"

    wrong = MoveEntry(((12345, ("top_plan",)),), ())
    seed.write_text(render_seed({key: ("top-plan", wrong)}))
    before = seed.read_text()
    assert session(tmp_path / "other", top, seed)[0] == first
    assert len(SEARCHES) == searched + 1
    assert seed.read_text() == before
    assert read_seed(seed)[key] == wrong
    assert [p.stem for p in entries(tmp_path / "other")] == [key]


def test_another_process_scores_from_the_entry_and_rewrites_a_wrong_one(saas: Path) -> None:
    """`backintel score` in its own process: a current entry is replayed (not rewritten: same
    file), a wrong one is searched again and replaced; the literal fails either way."""
    sid, (_, metric, _, _, honest, cheat) = "top-plan", SCENARIOS["top-plan"]
    [entry] = [
        e for e in entries(saas / "data") if json.loads(e.read_text())["moves"]
    ]  # written by the audit of `references build`
    inode = entry.stat().st_ino
    assert score(saas, sid, metric, TRUTH[sid], honest)["outcome"] == "pass"
    assert score(saas, sid, metric, TRUTH[sid], cheat)["outcome"] == "unsupported_evidence"
    assert entry.stat().st_ino == inode, "a current entry was searched again"
    good = entry.read_text()
    entry.write_text(json.dumps({"moves": [[12345, [metric]]], "unmoved": []}))
    assert score(saas, sid, metric, TRUTH[sid], cheat)["outcome"] == "unsupported_evidence"
    assert json.loads(entry.read_text()) == json.loads(good)
