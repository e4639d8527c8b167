"""The scorecard workbook (openpyxl): `summary`, `cases`, `trials` and `evidence` sheets.

Each sheet starts with the run's banners (calibration, replay), one per row, then a bold
header row, then one row per item. Text that would read as a formula is stored as text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from openpyxl import Workbook
from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE
from openpyxl.styles import Font, PatternFill
from openpyxl.worksheet.worksheet import Worksheet

from pytest_backintel.records.prices import load_prices
from reports.scorecard import pct, scorecard_context
from reports.summary import RunSummary

__all__ = ["SHEETS", "build_workbook", "write_workbook"]

SHEETS = ("summary", "cases", "trials", "evidence")
BANNER_FILL = PatternFill("solid", fgColor="FFF3CD")

TRIAL_COLUMNS = [
    "case", "split", "level", "family", "answerable", "trial", "outcome", "backend", "store",
    "latency_s", "requests", "input_tokens", "output_tokens", "tool_calls", "cost_usd", "reasons",
]  # fmt: skip
CASE_COLUMNS = [
    "case", "split", "level", "family", "answerable", "trials", "attempted", "passed_trials",
    "status", "outcomes",
]  # fmt: skip
EVIDENCE_COLUMNS = [
    "case", "trial", "evidence_id", "kind", "cited", "ran", "reproduced", "error", "code",
]  # fmt: skip

Cell = str | int | float | bool | None


def _safe(value: Any) -> Cell:
    if value is None or isinstance(value, bool | int | float):
        return value
    return ILLEGAL_CHARACTERS_RE.sub("", str(value))


def _append(sheet: Worksheet, row: list[Any], bold: bool = False) -> None:
    sheet.append([_safe(v) for v in row])
    for cell in sheet[sheet.max_row]:
        if isinstance(cell.value, str) and cell.value.startswith("="):
            cell.data_type = "s"
        if bold:
            cell.font = Font(bold=True)


def _start(book: Workbook, title: str, banners: list[str], first: bool = False) -> Worksheet:
    sheet: Worksheet = book.active if first else book.create_sheet()  # type: ignore[assignment]
    sheet.title = title
    for banner in banners:
        sheet.append([banner])
        cell = sheet.cell(sheet.max_row, 1)
        cell.font = Font(bold=True, size=13)
        cell.fill = BANNER_FILL
    return sheet


def _summary_sheet(book: Workbook, summary: RunSummary, banners: list[str]) -> None:
    sheet = _start(book, "summary", banners, first=True)
    context = scorecard_context(summary, [])
    _append(sheet, ["run", summary.run.run_id], bold=True)
    for key, value in context["facts"]:
        _append(sheet, [key, value])
    _append(sheet, [])
    _append(sheet, ["overall", context["overall_line"]], bold=True)
    for key, value in context["usage_rows"]:
        _append(sheet, [key, value])
    header = [
        "trials",
        "attempted",
        "passed",
        "failed",
        "blocked (infra_error, provider_error)",
        "not run",
    ]
    for dim, rows in summary.breakdowns.items():
        _append(sheet, [])
        _append(sheet, [dim, *header, "pass rate", "95% low", "95% high", "method"], bold=True)
        for name, t in rows:
            ci = summary.intervals.get("by", {}).get(dim, {}).get(name) or {}
            _append(
                sheet,
                [name, t.trials, t.attempted, t.passed, t.failed, t.blocked, t.not_run,
                 pct(t.pass_rate), ci.get("low"), ci.get("high"), ci.get("method", "")],
            )  # fmt: skip
    for split, values in summary.intervals.get("pass_k_by_split", {}).items():
        _append(sheet, [])
        _append(sheet, [f"pass^k ({split})", "estimate", "95% low", "95% high", "method"], True)
        for k, ci in values.items():
            row = [f"k={k}", ci["estimate"], ci["low"], ci["high"], ci["method"]]
            _append(sheet, row)
    sheet.column_dimensions["A"].width = 34
    sheet.column_dimensions["B"].width = 60


def _table(book: Workbook, title: str, banners: list[str], columns: list[str]) -> Worksheet:
    sheet = _start(book, title, banners)
    _append(sheet, columns, bold=True)
    sheet.freeze_panes = f"A{sheet.max_row + 1}"
    return sheet


def build_workbook(summary: RunSummary) -> Workbook:
    """The workbook for one run, not yet saved."""
    run = summary.run
    banners = run.banners
    book = Workbook()
    _summary_sheet(book, summary, banners)
    cases = _table(book, "cases", banners, CASE_COLUMNS)
    for c in summary.cases:
        _append(
            cases,
            [c.scenario_id, c.split, c.level, c.family, c.answerable, len(c.outcomes),
             c.attempted, c.passed_trials, c.status, ", ".join(c.outcomes)],
        )  # fmt: skip
    trials = _table(book, "trials", banners, TRIAL_COLUMNS)
    evidence = _table(book, "evidence", banners, EVIDENCE_COLUMNS)
    prices = load_prices()
    for r in run.records:
        usage = r.get("usage") or {}
        tokens_in: int | None = int(usage.get("input_tokens") or 0)
        tokens_out: int | None = int(usage.get("output_tokens") or 0)
        cost = prices.cost_usd(r.get("model") or run.model, tokens_in or 0, tokens_out or 0)
        if usage.get("tokens_reported") is False:  # the provider sent no counts: unknown, not 0
            tokens_in = tokens_out = cost = None
        reasons = "; ".join(str(x.get("message", "")) for x in r.get("reasons") or [])
        _append(
            trials,
            [r["scenario_id"], r.get("split"), r.get("level"), r.get("family"),
             r.get("answerable"), r.get("trial"), r["outcome"], r.get("backend"), r.get("store"),
             r.get("latency_s"), usage.get("requests"), tokens_in, tokens_out,
             usage.get("tool_calls"), "unknown" if cost is None else round(cost, 6), reasons],
        )  # fmt: skip
        for e in r.get("evidence") or []:
            reproduced = e.get("reproduced") or {}
            _append(
                evidence,
                [r["scenario_id"], r.get("trial"), e.get("id"), e.get("kind"),
                 ", ".join(e.get("cited") or []), e.get("ran"),
                 all(reproduced.values()) if reproduced else False, e.get("error"),
                 e.get("code")],
            )  # fmt: skip
    return book


def write_workbook(summary: RunSummary, out_dir: Path) -> Path:
    """Write `scorecard.xlsx` into `out_dir`."""
    path = out_dir / "scorecard.xlsx"
    build_workbook(summary).save(path)
    return path
