"""A model matrix's leaderboard as `leaderboard.md` and `leaderboard.html`, from the matrix
folder's `matrix.json` (written by the run, `pytest_backintel.records.matrix_folder`).

Each model's row: rank (tied where the paired difference by case cannot separate it from the
model ranked above), pass rate with its interval and the interval's method, trials passed of
attempted, blocked, tokens, cost and latency, and the paired difference the rank rests on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reports.load import RunFolderError
from reports.templating import TEMPLATES

__all__ = ["MATRIX_FILE", "leaderboard_context", "read_matrix", "write_leaderboard"]

MATRIX_FILE = "matrix.json"


def read_matrix(folder: Path) -> dict[str, Any] | None:
    """The `matrix.json` of a matrix folder (None when `folder` is not one)."""
    path = folder / MATRIX_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise RunFolderError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("leaderboard"), list):
        raise RunFolderError(f"{path}: expected an object with a `leaderboard` list")
    return data


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _signed(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1%}"


def leaderboard_context(matrix: dict[str, Any]) -> dict[str, Any]:
    """What the templates show: one dict of display strings per model, best first."""
    rows = []
    for row in matrix["leaderboard"]:
        rate, versus = row["pass_rate"], row.get("versus_above")
        bounds = f"[{_pct(rate['low'])}, {_pct(rate['high'])}]" if rate["low"] is not None else ""
        paired = "—"
        if versus:
            verdict = "separated" if versus.get("separated") else "tied"
            if versus.get("low") is None:
                verdict = "nothing to pair"
            paired = (
                f"{_signed(versus['estimate'])} [{_signed(versus['low'])}, "
                f"{_signed(versus['high'])}] vs {versus['against']} ({verdict}; {versus['method']})"
            )
        rows.append(
            {
                "rank": row["rank"],
                "model": row["model"],
                "folder": row["folder"],
                "rate": _pct(rate["estimate"]),
                "interval": bounds,
                "method": rate["method"],
                "passed": f"{row['passed']}/{row['attempted']}",
                "blocked": row["blocked"],
                "tokens": "n/a" if row["tokens"] is None else str(row["tokens"]),
                "cost": "n/a" if row["cost_usd"] is None else f"${row['cost_usd']:.4f}",
                "p50": "n/a" if row["latency_p50_s"] is None else f"{row['latency_p50_s']:.2f} s",
                "p90": "n/a" if row["latency_p90_s"] is None else f"{row['latency_p90_s']:.2f} s",
                "paired": paired,
            }
        )
    return {
        "matrix_id": matrix.get("matrix_id"),
        "trials_per_case": matrix.get("trials_per_case"),
        "rows": rows,
    }


def write_leaderboard(folder: Path, out_dir: Path | None = None) -> list[Path]:
    """Write `leaderboard.md` and `leaderboard.html` for the matrix folder `folder` (into
    `out_dir`, default the folder); [] when `folder` holds no `matrix.json`."""
    matrix = read_matrix(folder)
    if matrix is None:
        return []
    target = out_dir or folder
    target.mkdir(parents=True, exist_ok=True)
    context = leaderboard_context(matrix)
    out = []
    for name in ("leaderboard.md", "leaderboard.html"):
        path = target / name
        path.write_text(TEMPLATES.get_template(f"{name}.j2").render(**context), encoding="utf-8")
        out.append(path)
    return out
