"""The prediction scenarios on the real Olist release (`BACKINTEL_OLIST_SOURCE=real`).

The release is not in the repository and nothing is downloaded: the test writes the generated
world in the release's exact CSV format (nine files, `tests/test_real_olist.py`), pins their
digests in a checksum file of its own and loads them with the loader a user runs on the real
files (`backintel data olist --from DIR`). The format round-trips exactly, so the cohorts built
from those CSVs must be the committed ones, labels included.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
import sklearn.metrics  # noqa: F401  # before pytester snapshots sys.modules (numpy loads once)

from pytest_backintel.collect.loading import DEFINITIONS_DIR
from scenarios.olist.config import OlistConfig
from scenarios.olist.generator import generate
from scenarios.olist.real import load_real_olist, record_checksums
from scenarios.predict.tasks import TASKS
from scenarios.predict.world import (
    MAX_SCORING,
    OlistPredictRealWorld,
    OlistPredictWorld,
    Window,
    split_cohorts,
)
from scenarios.references import REFERENCES_DIR
from scenarios.worlds import get_world
from tests.test_real_olist import write_sample

LEVEL8 = DEFINITIONS_DIR / "level8"


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(data folder with the loaded release, its checksum file)."""
    root = tmp_path_factory.mktemp("real")
    folder = write_sample(root / "olist", generate(OlistConfig()))
    pins = root / "release.sha256"
    record_checksums(folder, pins)
    data = root / "data"
    load_real_olist(folder, data, checksums=pins)
    yield data, pins
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def real_env(monkeypatch: pytest.MonkeyPatch, release: tuple[Path, Path]) -> Path:
    data, pins = release
    monkeypatch.setenv("BACKINTEL_DATA_DIR", str(data))
    monkeypatch.setenv("BACKINTEL_OLIST_SOURCE", "real")
    monkeypatch.setenv("BACKINTEL_OLIST_CHECKSUMS", str(pins))
    return data


def test_the_cohorts_are_built_from_the_release_csvs_with_labels_kept_out_of_the_store(
    real_env: Path,
) -> None:
    world = get_world("olist-predict")
    assert isinstance(world, OlistPredictRealWorld)
    assert world.release.name == "olist-real"
    for task in TASKS:
        files = world.ensure_built(real_env, task.name)
        assert files.parquet_dir.is_relative_to(real_env / "worlds")
        scoring = pl.read_parquet(files.parquet_dir / f"{task.name}_scoring.parquet")
        assert task.target not in scoring.columns, "the scoring labels stay out of the store"
        committed = json.loads(
            (REFERENCES_DIR / f"olist-predict-{task.name}.json").read_text(encoding="utf-8")
        )
        (entry,) = committed["references"].values()
        hidden = world.hidden_cohort(f"{task.name}_training", "median")
        want = entry["values"]["cohort"]
        assert [r["entity"] for r in hidden] == [r["entity"] for r in want]
        assert [r["label"] for r in hidden] == pytest.approx([r["label"] for r in want])
        assert scoring["order_id"].to_list() == [r["entity"] for r in want]
    assert world.config_hash != OlistPredictWorld().config_hash, "its own build folder"


def test_a_large_scoring_window_is_a_sample_of_whole_persons() -> None:
    rows = [
        (f"t{i}", f"p{i}", datetime(2017, 3, 1), datetime(2017, 3, 9), i % 2) for i in range(50)
    ]
    rows += [  # 2 000 scoring orders, two per person
        (f"s{i}", f"q{i // 2}", datetime(2018, 4, 2), datetime(2018, 4, 9), i % 2)
        for i in range(2000)
    ]
    frame = pl.DataFrame(rows, schema=["entity", "group", "at", "label_at", "late"], orient="row")
    window = Window(datetime(2017, 1, 1), datetime(2018, 4, 1), datetime(2018, 6, 1))
    split = split_cohorts("l8-big", frame, window)
    assert MAX_SCORING - 1 <= split.scoring.height <= MAX_SCORING
    assert split.scoring.group_by("group").len()["len"].to_list() == [2] * (
        split.scoring.height // 2
    ), "a person's orders are kept together"
    assert split_cohorts("l8-big", frame, window).scoring.equals(split.scoring), "deterministic"


def test_prediction_scenarios_run_on_the_release_with_references_computed_after_answering(
    pytester: pytest.Pytester, real_env: Path
) -> None:
    cases = "l8-late-delivery or l8-order-value"
    results = pytester.path / "results"
    ok = pytester.runpytest_subprocess(
        str(LEVEL8), "-m", "development and prediction", "-k", cases,
        "--results-dir", str(results), "--run-id", "real", "-p", "no:cacheprovider",
    )  # fmt: skip
    ok.assert_outcomes(passed=2)
    records = [json.loads(line) for line in (results / "real" / "records.jsonl").open()]
    assert {r["prediction"]["permuted"]["criteria_met"] for r in records} == {False}
    assert {r["prediction"]["perturbed"]["criteria_met"] for r in records} == {False}
    wrong = pytester.runpytest_subprocess(
        str(LEVEL8), "-m", "development and prediction", "-k", cases, "--analyst", "perturbed",
        "--results-dir", str(results), "--run-id", "real-perturbed", "-p", "no:cacheprovider",
    )  # fmt: skip
    wrong.assert_outcomes(failed=2)
    assert any((real_env / "worlds").glob("olist-predict-real-*")), "built from the release"
