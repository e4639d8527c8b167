"""The leaderboard of a model matrix: pass rates with intervals, ranks that tie only where the
paired difference by case cannot separate two models, blocked trials apart; the matrix folder's
per-model run folders; `leaderboard.md` (snapshot) and the viewer's data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion

from pytest_backintel.records.leaderboard import leaderboard, leaderboard_lines
from pytest_backintel.records.matrix_folder import model_of_nodeid, write_matrix
from reports.leaderboard import write_leaderboard
from reports.load import load_run
from reports.summary import summarize
from reports.view.site import site_data

FOLDERS = {"openai:a": "openai-a", "openai:b": "openai-b", "openai:c": "openai-c"}


def record(model: str, case: int, trial: int, outcome: str, **extra: Any) -> dict[str, Any]:
    return {
        "nodeid": f"s/c{case:02d}.scenario.yaml::c{case:02d}[t{trial}-{FOLDERS[model]}]",
        "model": model,
        "scenario_id": f"c{case:02d}",
        "scenario_sha": "sha",
        "suite": "mine",
        "trial": trial,
        "split": "development",
        "level": 1,
        "family": "f",
        "world": "w",
        "snapshot": "s",
        "data_hash": "d",
        "outcome": outcome,
        "usage": {"input_tokens": 100, "output_tokens": 10, "tokens_reported": True},
        "latency_s": 1.0 + case / 10,
        "cost_usd": 0.001,
    } | extra


def runs(passes: dict[str, int], cases: int = 30, trials: int = 2) -> list[dict[str, Any]]:
    """Each model passes its first `passes[model]` cases in every trial, fails the rest."""
    return [
        record(m, c, t, "pass" if c < n else "wrong_value")
        for m, n in passes.items()
        for c in range(cases)
        for t in range(1, trials + 1)
    ]


def board(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_model: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_model.setdefault(r["model"], []).append(r)
    return [row.to_json() for row in leaderboard(by_model, FOLDERS)]


def test_ranks_tie_only_where_the_paired_interval_holds_zero() -> None:
    rows = board(runs({"openai:a": 30, "openai:b": 29, "openai:c": 10}))
    assert [(r["model"], r["rank"]) for r in rows] == [
        ("openai:a", 1),
        ("openai:b", 1),  # one case apart out of 30: the paired interval holds 0
        ("openai:c", 3),  # twenty cases apart: separated from the leader
    ]
    tied, separated = rows[1]["versus_above"], rows[2]["versus_above"]
    assert tied["low"] <= 0 <= tied["high"]
    assert not tied["separated"]
    assert separated["high"] < 0
    assert separated["separated"]
    assert separated["against"] == "openai:a", "decided against the first of the rank above"
    a = rows[0]["pass_rate"]
    assert a["estimate"] == 1.0
    assert a["low"] < 1.0, "every rate has an interval, even at 100%"
    c = rows[2]["pass_rate"]
    assert c["low"] < 1 / 3 < c["high"]
    assert "cluster-robust over 30 cases" in c["method"], "two trials per case: clustered"
    assert rows[0]["tokens"] == 60 * 110
    assert rows[0]["cost_usd"] == 0.06


def test_blocked_trials_are_counted_apart_not_as_failures() -> None:
    records = runs({"openai:a": 4, "openai:b": 4}, cases=4, trials=1)
    records[0] = records[0] | {"outcome": "provider_error", "cost_usd": None}
    rows = {r["model"]: r for r in board(records)}
    assert (rows["openai:a"]["attempted"], rows["openai:a"]["blocked"]) == (3, 1)
    assert rows["openai:a"]["pass_rate"]["estimate"] == 1.0
    assert rows["openai:a"]["cost_usd"] == 0.003, "a blocked trial's unknown cost is left out"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=2, max_size=4))
def test_ranks_are_ordered_and_start_at_one(passes: list[int]) -> None:
    models = list(FOLDERS)[: min(len(passes), 3)]
    rows = board(runs(dict(zip(models, passes, strict=False)), cases=12, trials=1))
    ranks = [r["rank"] for r in rows]
    assert ranks[0] == 1
    assert ranks == sorted(ranks)
    assert all(rank <= place for place, rank in enumerate(ranks, start=1))
    rates = [r["pass_rate"]["estimate"] for r in rows]
    assert rates == sorted(rates, reverse=True)


def test_a_matrix_item_id_names_its_model() -> None:
    folders = {"openai:a-b": "openai-a-b", "openai:b": "openai-b"}
    assert model_of_nodeid("f::c[t2-openai-a-b]", folders) == "openai:a-b"
    assert model_of_nodeid("f::c[t2-openai-b]", folders) == "openai:b"
    assert model_of_nodeid("f::c[t2]", folders) is None


def matrix_folder(tmp_path: Path) -> Path:
    records = runs({"openai:a": 3, "openai:b": 1}, cases=3, trials=2)
    models = ["openai:a", "openai:b"]
    header = {
        "run_id": "mx",
        "started_at": "2026-01-01T00:00:00+00:00",
        "trials": 2,
        "model": None,
        "planned_items": sorted(r["nodeid"] for r in records),
        "matrix": {
            "models": models,
            "folders": {m: FOLDERS[m] for m in models},
            "per_model": {m: {"model": m, "model_api": "chat_completions"} for m in models},
        },
    }
    (tmp_path / "mx").mkdir()
    (tmp_path / "mx" / "run.json").write_text(json.dumps(header))
    (tmp_path / "mx" / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    write_matrix(tmp_path / "mx", header, records)
    return tmp_path / "mx"


def test_each_model_has_a_run_folder_of_its_own(tmp_path: Path) -> None:
    folder = matrix_folder(tmp_path)
    for model, slug in (("openai:a", "openai-a"), ("openai:b", "openai-b")):
        run = load_run(folder / slug)
        assert run.header["model"] == model
        assert {r["model"] for r in run.records} == {model}
        assert run.missing_trials == []
        assert summarize(run).overall.trials == 6


def test_leaderboard_markdown(tmp_path: Path, snapshot: SnapshotAssertion) -> None:
    md, html = write_leaderboard(matrix_folder(tmp_path))
    assert md.read_text() == snapshot
    assert "<td>openai-a</td>" not in html.read_text()
    assert '<a href="openai-a/">openai:a</a>' in html.read_text()


def test_the_viewer_and_the_terminal_show_the_leaderboard(tmp_path: Path) -> None:
    folder = matrix_folder(tmp_path)
    matrix = json.loads((folder / "matrix.json").read_text())
    lines = leaderboard_lines(matrix["leaderboard"])
    assert lines[1].startswith("backintel:   #1 openai:a: pass 100.0% [")
    assert "(Wilson over 3 cases" in lines[1]
    for shown in (folder, folder / "openai-b"):  # the matrix, and a model's own folder
        run = load_run(shown)
        index, _ = site_data(run, summarize(run))
        assert [r["model"] for r in index["leaderboard"]["rows"]] == ["openai:a", "openai:b"]
    run = load_run(tmp_path / "mx" / "openai-a")
    assert site_data(run, summarize(run))[0]["leaderboard"] is not None
    assert leaderboard_lines([]) == []


def test_the_viewer_shows_the_leaderboard_in_a_browser(tmp_path: Path) -> None:
    from view_pages import chromium, open_view

    from reports.view import write_view

    folder = matrix_folder(tmp_path)
    site = write_view(load_run(folder / "openai-b"))
    (folder / "matrix.json").unlink()  # a folder that is no matrix's shows no leaderboard
    plain = write_view(load_run(folder / "openai-a"), out_dir=tmp_path / "plain")
    with chromium() as browser:
        opened = open_view(browser, site.index)
        board = opened.page.locator("#leaderboard table")
        assert opened.page.locator("#leaderboard h2").text_content() == "Leaderboard — matrix mx"
        rows = board.locator("tbody tr")
        assert rows.count() == 2
        first = rows.nth(0).locator("td").all_text_contents()
        assert first[:4] == ["1", "openai:a", "100.0%", "[43.9%, 100.0%]"]
        assert "Wilson over 3 cases" in first[4]
        second = rows.nth(1).locator("td").all_text_contents()
        assert "vs openai:a (tied;" in second[-1]
        assert opened.console == []
        other = open_view(browser, plain.index)
        assert other.page.locator("#leaderboard").is_hidden()


def test_a_model_with_nothing_attempted_comes_last_and_ties_with_none() -> None:
    records = runs({"openai:a": 0, "openai:b": 2, "openai:c": 0}, cases=4, trials=1)
    records = [
        r | {"outcome": "provider_error"} if r["model"] == "openai:c" else r for r in records
    ]
    rows = board(records)
    assert [(r["model"], r["rank"]) for r in rows] == [
        ("openai:b", 1),
        ("openai:a", 1),  # 0% against 50% over 4 cases: not separable
        ("openai:c", 3),  # nothing attempted: last, its own place
    ]
    assert rows[1]["pass_rate"]["estimate"] == 0.0
    assert rows[2]["pass_rate"]["estimate"] is None
    assert rows[2]["versus_above"]["separated"]
