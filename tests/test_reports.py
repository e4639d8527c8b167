"""`backintel report`: loading run folders, tallies, cost, scorecards, charts and workbook."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from helpers import CALIBRATION_CASES
from openpyxl import load_workbook
from syrupy.assertion import SnapshotAssertion

from pytest_backintel.outcomes import Outcome
from pytest_backintel.records.prices import PriceTableError, load_prices, parse_prices
from reports import CALIBRATION_BANNER, REPLAY_BANNER, RunFolderError, build_report, load_run
from reports.cli import main
from reports.summary import summarize
from reports.testing import header, record, write_run


def calibration_records(run_id: str = "calib") -> list[dict[str, Any]]:
    return [
        record(**spec, run_id=run_id, latency_s=0.25 * (i + 1))
        for i, spec in enumerate(CALIBRATION_CASES)
    ]


def every_outcome_records() -> list[dict[str, Any]]:
    families = ["orders", "repeat", "delivery"]
    return [
        record(
            f"case_{o.value}",
            o.value,
            run_id="every",
            family=families[i % 3],
            level=1 + i % 3,
            kind="model",
            name="pydantic-ai",
            model="openai:gpt-5.1",
            tokens=(1000 * i, 100 * i),
            latency_s=0.5 * i,
        )
        for i, o in enumerate(Outcome)
    ]


@pytest.fixture
def calibration_run(tmp_path: Path) -> Path:
    return write_run(tmp_path / "calib", header("calib"), calibration_records())


@pytest.fixture
def every_outcome_run(tmp_path: Path) -> Path:
    run_header = header("every", calibration=False, model="openai:gpt-5.1")
    return write_run(tmp_path / "every", run_header, every_outcome_records())


@pytest.fixture
def empty_run(tmp_path: Path) -> Path:
    return write_run(tmp_path / "empty", header("empty", calibration=False), None)


# -- loading -------------------------------------------------------------------------------


def test_torn_last_line_is_skipped_with_a_warning(calibration_run: Path) -> None:
    with (calibration_run / "records.jsonl").open("a") as f:
        f.write('{"scenario_id": "half')
    run = load_run(calibration_run)
    assert len(run.records) == len(CALIBRATION_CASES)
    assert len(run.warnings) == 1
    assert run.warnings[0].startswith("records.jsonl:7: skipped a torn last line")


def test_torn_middle_line_is_corruption(calibration_run: Path) -> None:
    lines = (calibration_run / "records.jsonl").read_text().splitlines()
    lines[2] = lines[2][:40]
    (calibration_run / "records.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(RunFolderError, match=r"records\.jsonl:3: not a JSON record"):
        load_run(calibration_run)


def test_parts_are_merged_when_records_jsonl_is_missing(tmp_path: Path) -> None:
    folder = write_run(tmp_path / "parts_run", header("parts_run"), None)
    records = calibration_records()
    for worker, chunk in (("gw0", records[:3]), ("gw1", records[3:])):
        part = folder / "parts" / f"records-{worker}.jsonl"
        part.parent.mkdir(exist_ok=True)
        part.write_text("".join(json.dumps(r) + "\n" for r in reversed(chunk)))
    run = load_run(folder)
    assert sorted(r["scenario_id"] for r in run.records) == sorted(
        c["case"] for c in CALIBRATION_CASES
    )
    assert [r["nodeid"] for r in run.records] == sorted(r["nodeid"] for r in records)
    assert any("merged 2 part file(s)" in w for w in run.warnings)


def test_a_missing_folder_is_an_error_naming_it(tmp_path: Path, capsys: Any) -> None:
    with pytest.raises(RunFolderError, match="no such run folder"):
        load_run(tmp_path / "nope")
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "no such run folder" in capsys.readouterr().err


# -- labels --------------------------------------------------------------------------------


def test_calibration_is_detected_from_the_header_or_the_records(tmp_path: Path) -> None:
    assert load_run(write_run(tmp_path / "a", header("a"), [])).is_calibration
    by_records = write_run(tmp_path / "b", header("b", calibration=False), calibration_records())
    assert load_run(by_records).is_calibration
    model = [record("x", kind="model", name="pydantic-ai")]
    plain = load_run(write_run(tmp_path / "c", header("c", calibration=False), model))
    assert not plain.is_calibration
    assert plain.banners == []


def test_replay_runs_are_labelled(tmp_path: Path) -> None:
    replay = [record("x", kind="replay", name="replay")]
    run = load_run(write_run(tmp_path / "r", header("r", calibration=False), replay))
    assert run.banners == [REPLAY_BANNER]


def test_calibration_banner_on_every_page_and_sheet(calibration_run: Path) -> None:
    files = build_report(calibration_run)
    assert CALIBRATION_BANNER in files.markdown.read_text()
    assert CALIBRATION_BANNER in files.html.read_text()
    book = load_workbook(files.workbook)
    for sheet in book.worksheets:
        assert sheet["A1"].value == CALIBRATION_BANNER, sheet.title


def test_a_model_run_carries_no_calibration_banner(every_outcome_run: Path) -> None:
    files = build_report(every_outcome_run)
    assert "CALIBRATION" not in files.markdown.read_text()
    assert "CALIBRATION" not in files.html.read_text()
    assert load_workbook(files.workbook)["summary"]["A1"].value == "run"


# -- tallies and cost ----------------------------------------------------------------------


def test_denominators_separate_blocked_and_not_run(every_outcome_run: Path) -> None:
    overall = summarize(load_run(every_outcome_run)).overall
    # infra_error and provider_error are blocked, not_run is not run: 3 of 16 not attempted
    assert (overall.trials, overall.attempted, overall.passed) == (16, 13, 1)
    assert (overall.blocked, overall.not_run, overall.failed) == (2, 1, 12)
    assert overall.pass_rate == pytest.approx(1 / 13)
    assert list(overall.outcomes) == [o.value for o in Outcome]


def test_cost_from_the_price_table(every_outcome_run: Path) -> None:
    usage = summarize(load_run(every_outcome_run)).usage
    # tokens: input 1000*i, output 100*i for i in 0..15 less infra_error and not_run (i = 13,
    # 15); a provider_error (i = 14) keeps the tokens it spent before the provider failed
    tokens_in, tokens_out = 1000 * (sum(range(13)) + 14), 100 * (sum(range(13)) + 14)
    assert (usage.input_tokens, usage.output_tokens) == (tokens_in, tokens_out)
    assert usage.cost_usd == pytest.approx((tokens_in * 1.25 + tokens_out * 10.0) / 1e6)


def test_unknown_price_is_unknown_never_zero(tmp_path: Path) -> None:
    records = [record("x", kind="model", model="acme:secret-7b", tokens=(500, 50))]
    folder = write_run(
        tmp_path / "u", header("u", calibration=False, model="acme:secret-7b"), records
    )
    files = build_report(folder)
    assert files.summary.usage.cost_usd is None
    md = files.markdown.read_text()
    assert "| cost (USD, prices as of 2025-11-15) | unknown |" in md
    trials = load_workbook(files.workbook)["trials"]
    assert trials.cell(2, 15).value == "unknown"


def test_price_table_rejects_zero_and_accepts_null() -> None:
    with pytest.raises(PriceTableError, match="never 0"):
        parse_prices({"as_of": "2025-01-01", "models": {"a:b": {"input": 0, "output": 1}}})
    table = parse_prices(
        {"as_of": "2025-01-01", "models": {"a:b": None, "c:d": {"input": 1, "output": 2}}}
    )
    assert table.cost_usd("a:b", 10, 10) is None
    assert table.cost_usd("c:d", 1_000_000, 1_000_000) == 3.0
    assert table.cost_usd("other:d", 1_000_000, 0) == 1.0  # a unique bare-name match
    assert table.cost_usd(None, 1, 1) is None


def test_committed_price_table_is_dated_and_valid() -> None:
    table = load_prices()
    assert table.as_of
    assert table.price_for("openai:gpt-5.1") is not None
    assert all(p is None or (p.input > 0 and p.output > 0) for p in table.models.values())


# -- scorecards, charts, workbook ------------------------------------------------------------


def test_calibration_scorecard_markdown(calibration_run: Path, snapshot: SnapshotAssertion) -> None:
    assert build_report(calibration_run).markdown.read_text() == snapshot


def test_every_outcome_scorecard_markdown(
    every_outcome_run: Path, snapshot: SnapshotAssertion
) -> None:
    assert build_report(every_outcome_run).markdown.read_text() == snapshot


def test_no_usage_scorecard_says_tokens_and_cost_are_unknown(
    tmp_path: Path, snapshot: SnapshotAssertion
) -> None:
    model = "openai:gpt-5.1"
    records = [
        record("counted", kind="model", name="m", model=model, tokens=(1000, 100), run_id="nu"),
        record("silent", kind="model", name="m", model=model, tokens=None, run_id="nu"),
    ]
    run = write_run(tmp_path / "nu", header("nu", calibration=False, model=model), records)
    files = build_report(run)
    md = files.markdown.read_text()
    warning = "TOKEN USAGE UNKNOWN — the provider reported no token usage for 1 trial(s)"
    assert f"> **{warning}" in md
    assert "| input tokens | 1000 + unknown (1 trial(s) reported no usage) |" in md
    assert "| cost (USD, prices as of " in md
    assert "| unknown |" in md.split("cost (USD", 1)[1].splitlines()[0]
    assert warning in files.html.read_text()
    sheet = load_workbook(files.workbook)["trials"]
    rows = [[c.value for c in row] for row in sheet.iter_rows()]
    silent = next(r for r in rows if r[0] == "silent")
    assert silent[11:13] == [None, None]
    assert silent[14] == "unknown"
    assert md == snapshot


def test_empty_run_scorecard(empty_run: Path, snapshot: SnapshotAssertion) -> None:
    files = build_report(empty_run)
    md = files.markdown.read_text()
    assert "0 trials: 0 attempted" in md
    assert "pass rate n/a" in md
    assert md == snapshot
    assert all(c.svg.exists() and c.png.exists() for c in files.charts)


def test_charts_exist_as_svg_and_png(calibration_run: Path) -> None:
    files = build_report(calibration_run)
    names = sorted(p.name for p in (calibration_run / "charts").iterdir())
    assert names == sorted(
        f"{n}.{ext}"
        for n in ("pass_rate_by_family", "outcome_breakdown", "latency_distribution")
        for ext in ("svg", "png")
    )
    for chart in files.charts:
        assert chart.svg.read_text().startswith("<svg")
        assert CALIBRATION_BANNER in chart.svg.read_text()
        assert chart.png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _data_rows(sheet: Any, banners: int) -> int:
    return int(sheet.max_row) - banners - 1


def test_workbook_sheets_and_row_counts(every_outcome_run: Path) -> None:
    book = load_workbook(build_report(every_outcome_run).workbook)
    assert book.sheetnames == ["summary", "cases", "trials", "evidence"]
    assert _data_rows(book["cases"], 0) == 16
    assert _data_rows(book["trials"], 0) == 16
    assert _data_rows(book["evidence"], 0) == 14  # infra_error and not-run trials cite nothing
    header_row = [c.value for c in book["trials"][1]]
    assert header_row[:7] == ["case", "split", "level", "family", "answerable", "trial", "outcome"]
    outcomes = sorted(str(row[6].value) for row in book["trials"].iter_rows(min_row=2))
    assert outcomes == sorted(o.value for o in Outcome)


def test_workbook_row_counts_with_banner_and_trials(tmp_path: Path) -> None:
    records = [record(c, trial=t) for c in ("a", "b") for t in range(3)]
    folder = write_run(tmp_path / "k", header("k", trials=3), records)
    book = load_workbook(build_report(folder).workbook)
    assert _data_rows(book["cases"], 1) == 2
    assert _data_rows(book["trials"], 1) == 6
    assert _data_rows(book["evidence"], 1) == 6


def test_pass_k_table_in_the_scorecard(tmp_path: Path) -> None:
    outcomes = {"a": ["pass", "pass", "wrong_value"], "b": ["pass", "pass", "pass"]}
    records = [record(c, o, trial=t) for c, per in outcomes.items() for t, o in enumerate(per)]
    md = build_report(write_run(tmp_path / "pk", header("pk", trials=3), records)).markdown
    # a: (3, 2), b: (3, 3) -> k=1 (2/3 + 1)/2, k=2 (1/3 + 1)/2, k=3 (0 + 1)/2
    # each with its t interval over the two cases (clipped to [0, 1]: two cases say little)
    text = md.read_text()
    assert (
        "| development | 0.833 [0.000, 1.000] | 0.667 [0.000, 1.000] | 0.500 [0.000, 1.000] |"
        in text
    )
    assert "a t interval over the cases' C(c, k) / C(n, k)" in text
    single = build_report(write_run(tmp_path / "one", header("one"), [record("a")])).markdown
    assert "pass^k" not in single.read_text()


def test_formula_like_text_is_stored_as_text(tmp_path: Path) -> None:
    rec = record("x", "wrong_value")
    rec["reasons"][0]["message"] = '=HYPERLINK("http://evil")'
    folder = write_run(tmp_path / "f", header("f", calibration=False), [rec])
    trials = load_workbook(build_report(folder).workbook)["trials"]
    assert trials.cell(2, 16).data_type == "s"


def test_report_cli_writes_everything(calibration_run: Path, capsys: Any) -> None:
    assert main(["report", str(calibration_run)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(CALIBRATION_BANNER)
    assert "6/6 attempted trials passed (100.0%)" in out
    for name in ("scorecard.md", "scorecard.html", "scorecard.xlsx"):
        assert (calibration_run / name).exists()


def test_docs_example_runs(capsys: Any) -> None:
    text = (Path(__file__).parent.parent / "docs" / "reports.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 1
    exec(compile(blocks[0], "docs/reports.md", "exec"), {})
    assert "DECISION: REJECT" in capsys.readouterr().out


def test_the_scorecard_names_the_stores_the_trials_ran_on(tmp_path: Path) -> None:
    """A run of sources of your own on PostgreSQL under the default `--store sqlite`: the
    scorecard names postgres (and what `--store` said), never sqlite alone."""
    from reports.scorecard import _stores

    assert _stores({"store_backend": "sqlite"}) == "sqlite"  # an older run.json
    assert _stores({"store_backend": "sqlite", "stores_used": ["sqlite"]}) == "sqlite"
    assert _stores({"store_backend": "sqlite", "stores_used": ["postgres"]}) == (
        "postgres (--store sqlite)"
    )
    head = header("pg") | {"store_backend": "sqlite", "stores_used": ["postgres"]}
    folder = write_run(tmp_path / "pg", head, [record("x")])
    assert main(["report", str(folder)]) == 0
    text = (folder / "scorecard.md").read_text()
    assert "| store backend | postgres (--store sqlite) |" in text, text[:2000]
