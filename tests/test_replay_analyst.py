"""Record and replay: `--record` keeps each trial's messages as a cassette; `--analyst
replay:DIR` replays the recorded model responses offline, running the tools again for real."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import ANSWER, FEW, orders_store, script
from hypothesis import given
from hypothesis import strategies as st
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ToolReturnPart,
)
from pydantic_ai.models.function import FunctionModel

from analyst.agent import ModelAnalyst
from analyst.replay import ReplayAnalyst, ReplayError
from pytest_backintel.analyst_api import AnalystConfig, AnalystLimits, AnalystTask
from pytest_backintel.contract import AnalystAnswer
from pytest_backintel.options import analyst_spec
from pytest_backintel.records.cassettes import (
    CassetteError,
    case_key,
    cassette_path,
    find_cassette_dir,
    write_cassette,
)
from pytest_backintel.run.analysts import AnalystLoadError, load_analyst
from stores.base import ProvisionedStore


def task(store: ProvisionedStore, key: str | None = "shop-count/t1") -> AnalystTask:
    return AnalystTask(
        "How many orders?", store.connect, store.display_id, AnalystLimits(), case_key=key
    )


def sql_returns(messages: list[dict[str, Any]]) -> list[Any]:
    return [
        part.content
        for msg in ModelMessagesTypeAdapter.validate_python(messages)
        if isinstance(msg, ModelRequest)
        for part in msg.parts
        if isinstance(part, ToolReturnPart) and part.tool_name == "run_sql"
    ]


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    """A run folder holding the cassette of one recorded trial on a 2-row store."""
    backend, store = orders_store(tmp_path / "recorded", rows=2)
    run = ModelAnalyst(FunctionModel(script)).answer(task(store))
    backend.teardown_session()
    write_cassette(tmp_path / "run", "shop-count/t1", run)
    return tmp_path / "run"


def test_replay_gives_the_recorded_answer_and_runs_the_tools_again(
    tmp_path: Path, recorded: Path
) -> None:
    backend, fresh = orders_store(tmp_path / "fresh", rows=3)  # the tools now see 3 rows
    run = ReplayAnalyst(recorded).answer(task(fresh))
    backend.teardown_session()
    assert isinstance(run.output, AnalystAnswer)
    assert run.output.model_dump(mode="json")["metrics"] == ANSWER["metrics"]
    assert [c["tool"] for c in run.tool_calls] == ["list_tables", "run_sql"]
    assert "3" in str(sql_returns(run.messages)), "run_sql ran against the fresh store"
    recorded_messages = json.loads(
        cassette_path(recorded / "cassettes", "shop-count/t1").read_text()
    )
    assert "2" in str(sql_returns(recorded_messages))
    assert run.usage.requests == 3


def test_a_replay_that_asks_for_more_than_was_recorded_fails_plainly(
    tmp_path: Path, recorded: Path
) -> None:
    path = cassette_path(recorded / "cassettes", "shop-count/t1")
    messages = json.loads(path.read_text())
    path.write_text(json.dumps(messages[:-2]))  # drop the final answer
    backend, store = orders_store(tmp_path / "fresh", rows=2)
    with pytest.raises(ReplayError, match="has 2 recorded responses but the agent asked"):
        ReplayAnalyst(recorded).answer(task(store))
    backend.teardown_session()


@pytest.mark.parametrize(
    ("key", "match"), [(None, "needs the trial's case key"), ("other/t1", "no cassette for")]
)
def test_replay_needs_the_trials_cassette(
    tmp_path: Path, recorded: Path, key: str | None, match: str
) -> None:
    backend, store = orders_store(tmp_path / "fresh", rows=2)
    with pytest.raises(ReplayError, match=match):
        ReplayAnalyst(recorded).answer(task(store, key))
    backend.teardown_session()


def test_the_cassette_folder_is_found_from_a_run_folder_or_itself(
    tmp_path: Path, recorded: Path
) -> None:
    assert find_cassette_dir(recorded) == recorded / "cassettes"
    assert find_cassette_dir(recorded / "cassettes") == recorded / "cassettes"
    (tmp_path / "empty").mkdir()
    with pytest.raises(CassetteError, match="holds no cassettes"):
        find_cassette_dir(tmp_path / "empty")
    with pytest.raises(CassetteError, match="does not exist"):
        find_cassette_dir(tmp_path / "missing")


@given(st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True), st.integers(1, 999))
def test_case_keys_name_one_file_per_scenario_and_trial(scenario: str, trial: int) -> None:
    key = case_key(scenario, trial)
    assert cassette_path(Path("c"), key) == Path("c") / scenario / f"t{trial}.json"


@pytest.mark.parametrize("bad", ["../x/t1", "x/t0", "x", "x/t1/y"])
def test_a_malformed_case_key_is_rejected(bad: str) -> None:
    with pytest.raises(CassetteError):
        cassette_path(Path("c"), bad)


def test_replay_specs_are_checked_before_the_run(tmp_path: Path) -> None:
    assert analyst_spec(f"replay:{tmp_path}") == f"replay:{tmp_path}"
    with pytest.raises(pytest.UsageError, match="give the recorded run folder"):
        analyst_spec("replay:")
    with pytest.raises(AnalystLoadError, match="holds no cassettes"):
        load_analyst(f"replay:{tmp_path}", AnalystConfig())


# -- through pytest: a recorded calibration run replays to the same outcomes ----------------------


def bench(pytester: pytest.Pytester, run_id: str, *args: str) -> list[dict[str, Any]]:
    results = pytester.path / "results"
    pytester.runpytest_subprocess(
        *map(str, FEW),
        "--results-dir",
        str(results),
        "--run-id",
        run_id,
        "-p",
        "no:randomly",
        *args,
    )
    lines = (results / run_id / "records.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.parametrize(
    ("analyst", "record_workers", "replay_workers", "outcomes"),
    [
        ("perturbed", [], ["-n", "2"], {"wrong_value", "pass"}),
        ("reference", ["-n", "2"], [], {"pass"}),
    ],
)
def test_a_recorded_calibration_run_replays_offline_to_the_same_outcomes(
    pytester: pytest.Pytester,
    analyst: str,
    record_workers: list[str],
    replay_workers: list[str],
    outcomes: set[str],
) -> None:
    recorded = bench(pytester, "rec", "--analyst", analyst, "--record", *record_workers)
    results = pytester.path / "results"
    cassettes = sorted(
        p.relative_to(results / "rec" / "cassettes").as_posix()
        for p in (results / "rec" / "cassettes").rglob("*.json")
    )
    assert cassettes == sorted(f"{r['case_key']}.json" for r in recorded)
    replayed = bench(pytester, "rep", "--analyst", f"replay:{results / 'rec'}", *replay_workers)
    assert [(r["nodeid"], r["outcome"]) for r in replayed] == [
        (r["nodeid"], r["outcome"]) for r in recorded
    ]
    assert {r["outcome"] for r in recorded} == outcomes
    assert [r["answer"] for r in replayed] == [r["answer"] for r in recorded]
    assert {r["analyst"]["kind"] for r in replayed} == {"replay"}
    run = json.loads((results / "rep" / "run.json").read_text())
    assert run["analyst"]["kind"] == "replay"
    assert run["analyst"]["calibration"] is False


def test_the_documented_commands_parse(pytester: pytest.Pytester, tmp_path: Path) -> None:
    doc = (Path(__file__).parent.parent / "docs" / "records.md").read_text(encoding="utf-8")
    commands = [
        line.split("uv run pytest", 1)[1].split()
        for line in doc.splitlines()
        if line.strip().startswith("uv run pytest")
    ]
    assert len(commands) >= 2
    for args in commands:
        config = pytester.parseconfig(*args, "--results-dir", str(tmp_path))
        assert config.getoption("--analyst") in ("perturbed", "replay:results/rec")
