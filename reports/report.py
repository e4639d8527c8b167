"""`backintel report`: every artefact of one run folder, written into that folder."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from reports.charts import ChartFile, render_charts
from reports.leaderboard import write_leaderboard
from reports.load import load_run
from reports.reviews import apply_reviews, review_note
from reports.scorecard import write_scorecards
from reports.summary import RunSummary, summarize
from reports.view import ViewSite, write_view
from reports.workbook import write_workbook

__all__ = ["ReportFiles", "build_report"]


@dataclass(frozen=True)
class ReportFiles:
    summary: RunSummary
    markdown: Path
    html: Path
    workbook: Path
    charts: list[ChartFile]
    view: ViewSite
    leaderboard: list[Path] = field(default_factory=list)
    """`leaderboard.md` and `leaderboard.html` when the folder is a model matrix's."""


def build_report(
    run_dir: Path | str, out_dir: Path | str | None = None, with_reviews: bool = False
) -> ReportFiles:
    """Render `scorecard.md`, `scorecard.html`, `scorecard.xlsx`, `charts/*.{svg,png}` and
    the viewer `view/` for the run in `run_dir` (into `out_dir`, default the run folder); for
    a model matrix's folder also `leaderboard.md` and `leaderboard.html`; a person's reviews
    are counted apart, and used for the outcomes only `with_reviews`."""
    run = load_run(run_dir)
    note = review_note(run, with_reviews)
    if with_reviews:
        run = apply_reviews(run)[0]
    target = Path(out_dir) if out_dir is not None else run.path
    target.mkdir(parents=True, exist_ok=True)
    summary = replace(summarize(run), reviews=note)
    charts = render_charts(summary, target / "charts")
    md, html = write_scorecards(summary, charts, target)
    book = write_workbook(summary, target)
    view = write_view(run, out_dir=target / "view", summary=summary, charts=charts)
    board = write_leaderboard(run.path, target)
    return ReportFiles(summary, md, html, book, charts, view, board)
