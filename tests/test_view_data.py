"""The data the viewer is built from: snapshots of the index and of opened trials, bounded
hostile text, the escaping of the data files, the transcript, and a comparison read from
`compare`'s result fields."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion
from view_pages import HOSTILE, detailed_record

from reports import compare_runs, load_run, summarize
from reports.cli import main as reports_main
from reports.testing import header, record, write_run
from reports.view import write_view
from reports.view.data import question_of, trial_detail
from reports.view.pairs import comparison_data
from reports.view.site import CHUNK_SIZE, js_payload, site_data
from reports.view.text import RESULT_LIMIT, clip
from reports.view.transcript import transcript


def _runs(tmp_path: Path) -> tuple[Any, Any]:
    base = [
        detailed_record("delivered_orders", "pass", run_id="base"),
        record("late_share", "pass", run_id="base", family="delivery", latency_s=2.5),
        record("customer_age", "pass", run_id="base", answerable=False, level=3),
    ]
    cand = [
        detailed_record("delivered_orders", "wrong_value", run_id="cand", text=HOSTILE),
        record("late_share", "timeout", run_id="cand", family="delivery", tokens=None),
        record("customer_age", "infra_error", run_id="cand", answerable=False, level=3),
    ]
    cand[2]["refusal"] = {
        "forbidden_metric": "average_customer_age",
        "refused": True,
        "concepts": [{"synonyms": ["birth date", "date of birth"], "named": True}],
    }
    baseline = load_run(write_run(tmp_path / "base", header("base"), base))
    candidate = load_run(write_run(tmp_path / "cand", header("cand"), cand))
    return baseline, candidate


def test_the_index_and_opened_trials_match_their_snapshots(
    tmp_path: Path, snapshot: SnapshotAssertion
) -> None:
    baseline, candidate = _runs(tmp_path)
    index, refused = site_data(candidate, summarize(candidate), baseline)
    assert refused is None
    assert index == snapshot(name="index")
    details = [trial_detail(n, r) for n, r in enumerate(candidate.records)]
    assert details == snapshot(name="trials")


def test_a_comparison_follows_the_fields_compare_gives(tmp_path: Path) -> None:
    baseline, candidate = _runs(tmp_path)
    result = compare_runs(baseline, candidate)
    data = comparison_data(result, baseline, candidate)
    assert data["result"] == {"accepted": False, "no_change": False, "verdict": "REJECT"}
    (suite,) = data["suites"]
    assert suite["counts"] == {"blocked": 1, "broken": 2}
    assert {c["case"]: c["change"] for c in suite["cases"]} == {
        "customer_age": "blocked",
        "delivered_orders": "broken",
        "late_share": "broken",
    }
    # a suite that carries another verdict and statistic is shown with them
    better = dataclasses.replace(result.suites[0], p_value=0.5)
    grown_type = dataclasses.make_dataclass(
        "Grown",
        [("verdict", str, "worse"), ("effect", float, -0.25)],
        bases=(type(better),),
        frozen=True,
    )
    grown = grown_type(**{f.name: getattr(better, f.name) for f in dataclasses.fields(better)})
    data = comparison_data(dataclasses.replace(result, suites=[grown]), baseline, candidate)
    assert data["suites"][0]["stats"]["verdict"] == "worse"
    assert data["suites"][0]["stats"]["effect"] == -0.25
    assert data["suites"][0]["stats"]["p_value"] == 0.5


def test_view_writes_the_site_and_says_when_a_comparison_is_refused(tmp_path: Path) -> None:
    baseline, candidate = _runs(tmp_path)
    other = write_run(tmp_path / "other", header("other"), [record("another_case")])
    assert reports_main(["view", str(candidate.path), str(baseline.path)]) == 0
    assert (candidate.path / "view" / "index.html").is_file()
    assert (candidate.path / "charts" / "outcome_breakdown.svg").is_file()
    assert reports_main(["view", str(candidate.path), str(other)]) == 2
    index = (candidate.path / "view" / "data" / "index.js").read_text()
    assert "refusing to compare runs over different scenarios" in index
    assert reports_main(["view", str(tmp_path / "missing")]) == 2


def test_trials_are_split_into_chunks_and_old_chunks_are_removed(tmp_path: Path) -> None:
    many = [record(f"case-{i:03d}") for i in range(CHUNK_SIZE * 2 + 1)]
    run = load_run(write_run(tmp_path / "run", header("run"), many))
    site = write_view(run)
    data = site.index.parent / "data"
    assert sorted(p.name for p in data.glob("*.js")) == [
        "index.js", "run-0.js", "run-1.js", "run-2.js",
    ]  # fmt: skip
    write_view(load_run(write_run(tmp_path / "run", header("run"), many[:3])))
    assert sorted(p.name for p in data.glob("*.js")) == ["index.js", "run-0.js"]


def _decoded(payload: str) -> Any:
    prefix, suffix = 'BACKINTEL.load("x",', ");\n"
    assert payload.startswith(prefix)
    assert payload.endswith(suffix)
    return json.loads(payload[len(prefix) : -len(suffix)])


@given(st.text())
def test_any_text_survives_the_data_file_and_cannot_end_a_script(text: str) -> None:
    payload = js_payload("x", {"text": text})
    assert _decoded(payload) == {"text": text}
    for unsafe in ("</", "\u2028", "\u2029"):
        assert unsafe not in payload


def test_non_finite_numbers_are_named_not_written_as_invalid_json() -> None:
    assert _decoded(js_payload("x", [float("nan"), float("inf")])) == ["nan", "inf"]


@given(st.text(), st.integers(min_value=1, max_value=50))
def test_clipped_text_keeps_its_start_and_states_its_size(text: str, limit: int) -> None:
    out = clip(text, limit)
    if len(text) <= limit:
        assert out == text
    else:
        assert out.startswith(text[:limit])
        assert f"{len(text):,} characters in all, the first {limit:,} shown" in out


def test_the_transcript_lists_turns_and_tool_calls_in_order_with_bounded_results() -> None:
    rec = detailed_record("c", tool_result="z" * (RESULT_LIMIT + 10))
    entries = transcript(rec)
    assert [e["kind"] for e in entries] == ["system", "user", "model", "tool_call", "tool_result"]
    assert json.loads(entries[3]["text"]) == {"sql": rec["answer"]["evidence"][0]["code"]}
    assert entries[4]["text"].endswith(
        f"{RESULT_LIMIT + 10:,} characters in all, the first 4,000 shown"
    )
    # without messages, the bare tool calls; with neither, nothing
    bare = {"tool_calls": [{"tool": "run_sql", "args": {"sql": "SELECT 1"}}]}
    assert transcript(bare) == [
        {"kind": "tool_call", "title": "tool call: run_sql", "text": '{"sql": "SELECT 1"}'}
    ]
    assert transcript({}) == []
    assert transcript({"messages": ["junk", {"kind": "odd"}]})[0]["title"] == "unreadable message"


def test_a_record_without_its_question_takes_it_from_the_first_prompt() -> None:
    prompt = "How many orders?\n\n## How your answer is scored\n\nExactly."
    rec = {"messages": [{"kind": "request", "parts": [{"part_kind": "user-prompt",
                                                       "content": prompt}]}]}  # fmt: skip
    assert question_of(rec) == "How many orders?"
    assert question_of({"question": "Q?", **rec}) == "Q?"
    assert question_of({}) == ""
