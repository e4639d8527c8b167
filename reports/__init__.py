"""Scorecards, charts, workbooks and baseline comparison over `results/<run-id>/` folders."""

from reports.compare import Comparison, ComparisonRefused, compare_runs, render_comparison
from reports.load import CALIBRATION_BANNER, REPLAY_BANNER, Run, RunFolderError, load_run
from reports.report import ReportFiles, build_report
from reports.stats import mcnemar_exact, pass_hat_k
from reports.summary import RunSummary, summarize

__all__ = [
    "CALIBRATION_BANNER",
    "REPLAY_BANNER",
    "Comparison",
    "ComparisonRefused",
    "ReportFiles",
    "Run",
    "RunFolderError",
    "RunSummary",
    "build_report",
    "compare_runs",
    "load_run",
    "mcnemar_exact",
    "pass_hat_k",
    "render_comparison",
    "summarize",
]
