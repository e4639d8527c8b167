"""Write the viewer: `view/index.html`, its script and style, and the data as JavaScript
files that hand JSON to the page (`BACKINTEL.load(name, {...})`), so the site opens from the
file system with no server and fetches nothing from the network.

The trial list is one index file; each trial's detail lives in a chunk of `CHUNK_SIZE`
trials that the page loads only when one of them is opened.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reports.charts import ChartFile
from reports.load import Run
from reports.reviews import reviews_by_trial, trial_key
from reports.summary import RunSummary, summarize
from reports.view.data import headline, reviewed, run_rows, trial_detail
from reports.view.pairs import comparison_data, refused_data

__all__ = ["CHUNK_SIZE", "ViewSite", "js_payload", "site_data", "write_view"]

CHUNK_SIZE = 50
ASSETS = Path(__file__).parent / "assets"
ASSET_FILES = ("index.html", "trial.js", "view.js", "view.css")


@dataclass(frozen=True)
class ViewSite:
    index: Path
    """`view/index.html`: open it in a browser."""
    trials: int
    chunks: int
    refused: str | None = None
    """Why the comparison with the baseline was refused (the page says it too)."""


def _finite(value: Any) -> Any:
    """JSON-safe: NaN and infinities (which JSON cannot carry) become their names."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def js_payload(name: str, data: Any) -> str:
    """A JavaScript statement handing `data` to the page. JSON is valid JavaScript; `</`,
    U+2028 and U+2029 are escaped so no string can end a script or a line early."""
    text = json.dumps(_finite(data), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    text = text.replace("</", "<\\/").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return f"BACKINTEL.load({json.dumps(name)},{text});\n"


def _chunks(prefix: str, run: Run) -> dict[str, list[dict[str, Any]]]:
    records = run.records
    found = reviews_by_trial(run.path)

    def detail(n: int) -> dict[str, Any]:
        return trial_detail(n, records[n]) | reviewed(records[n], found.get(trial_key(records[n])))

    return {
        f"{prefix}-{start // CHUNK_SIZE}": [
            detail(n) for n in range(start, min(start + CHUNK_SIZE, len(records)))
        ]
        for start in range(0, len(records), CHUNK_SIZE)
    }


def _leaderboard(run: Run) -> dict[str, Any] | None:
    """The leaderboard of the matrix `run` is (or, for a model's folder, is part of)."""
    from reports.leaderboard import leaderboard_context, read_matrix

    matrix = read_matrix(run.path)
    if matrix is None and run.header.get("matrix_of"):
        matrix = read_matrix(run.path.parent)
    return leaderboard_context(matrix) if matrix is not None else None


def site_data(
    run: Run,
    summary: RunSummary,
    baseline: Run | None = None,
    charts: list[dict[str, str]] | None = None,
) -> tuple[dict[str, Any], str | None]:
    """The index the page starts from (headline, list rows, questions, comparison) and why a
    comparison was refused, if it was."""
    rows, questions = run_rows(run)
    index: dict[str, Any] = {
        "headline": headline(summary),
        "charts": charts or [],
        "chunk_size": CHUNK_SIZE,
        "rows": rows,
        "questions": questions,
        "comparison": None,
        "baseline": None,
        "leaderboard": _leaderboard(run),
    }
    refused = None
    if baseline is not None:
        from reports.compare import ComparisonRefused, compare_runs

        base_rows, base_questions = run_rows(baseline)
        index["baseline"] = {"headline": headline(summarize(baseline)), "rows": base_rows}
        for case, question in base_questions.items():
            questions.setdefault(case, question)
        try:
            index["comparison"] = comparison_data(compare_runs(baseline, run), baseline, run)
        except ComparisonRefused as exc:
            refused = str(exc)
            index["comparison"] = refused_data(refused, baseline, run)
    return index, refused


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def write_view(
    run: Run,
    baseline: Run | None = None,
    out_dir: Path | None = None,
    summary: RunSummary | None = None,
    charts: list[ChartFile] | None = None,
) -> ViewSite:
    """Write the site for `run` (compared with `baseline` when given) into `out_dir`,
    default `<run folder>/view/`; earlier data files there are replaced."""
    target = out_dir if out_dir is not None else run.path / "view"
    data_dir = target / "data"
    if data_dir.is_dir():
        for old in data_dir.glob("*.js"):
            old.unlink()
    data_dir.mkdir(parents=True, exist_ok=True)
    for name in ASSET_FILES:
        shutil.copyfile(ASSETS / name, target / name)
    pictures = [
        {"title": c.title, "src": Path(os.path.relpath(c.svg, target)).as_posix()}
        for c in charts or []
    ]
    index, refused = site_data(run, summary or summarize(run), baseline, pictures)
    _write(data_dir / "index.js", js_payload("index", index))
    chunks = _chunks("run", run) | (_chunks("baseline", baseline) if baseline else {})
    for name, details in chunks.items():
        _write(data_dir / f"{name}.js", js_payload(name, details))
    return ViewSite(target / "index.html", len(run.records), len(chunks), refused)
