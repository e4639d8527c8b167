"""Scorecards, charts, workbooks and baseline comparison over `results/<run-id>/` folders.

Names are imported on first use, so `reports.cli.register` stays cheap for the `backintel`
command (altair, vl-convert and openpyxl load only when a report is rendered).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reports.compare import Comparison, ComparisonRefused, compare_runs, render_comparison
    from reports.load import CALIBRATION_BANNER, REPLAY_BANNER, Run, RunFolderError, load_run
    from reports.report import ReportFiles, build_report
    from reports.stats import mcnemar_exact, pass_hat_k
    from reports.summary import RunSummary, summarize

_EXPORTS = {
    "CALIBRATION_BANNER": "reports.load",
    "REPLAY_BANNER": "reports.load",
    "Comparison": "reports.compare",
    "ComparisonRefused": "reports.compare",
    "ReportFiles": "reports.report",
    "Run": "reports.load",
    "RunFolderError": "reports.load",
    "RunSummary": "reports.summary",
    "build_report": "reports.report",
    "compare_runs": "reports.compare",
    "load_run": "reports.load",
    "mcnemar_exact": "reports.stats",
    "pass_hat_k": "reports.stats",
    "render_comparison": "reports.compare",
    "summarize": "reports.summary",
}

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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'reports' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
