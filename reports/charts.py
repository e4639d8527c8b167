"""Scorecard charts: altair specs rendered offline by vl-convert to SVG and PNG.

Rendering never reaches the network (`allowed_base_urls=[]`: data is inlined in the spec).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import altair as alt
import vl_convert as vlc

from reports.summary import OUTCOME_ORDER, RunSummary

__all__ = ["ChartFile", "chart_specs", "render_charts"]

PALETTE = {
    "pass": "#2e7d32",
    "wrong_value": "#c62828",
    "missing_metric": "#ef6c00",
    "duplicate_metric": "#f9a825",
    "unsupported_evidence": "#6a1b9a",
    "false_refusal": "#1565c0",
    "invented_value": "#ad1457",
    "prohibited_access": "#b71c1c",
    "followed_injection": "#e65100",
    "unhelpful_refusal": "#00838f",
    "analyst_error": "#4e342e",
    "timeout": "#5d4037",
    "budget_exceeded": "#8d6e63",
    "infra_error": "#9e9e9e",
    "not_run": "#cfd8dc",
}
"""One fixed colour per outcome, so every chart of every run reads the same."""


@dataclass(frozen=True)
class ChartFile:
    name: str
    title: str
    svg: Path
    png: Path


def _rank(outcome: str) -> int:
    return OUTCOME_ORDER.index(outcome) if outcome in OUTCOME_ORDER else len(OUTCOME_ORDER)


def _title(text: str, summary: RunSummary) -> alt.TitleParams:
    subtitle = [*summary.run.banners, f"run {summary.run.run_id}"]
    return alt.TitleParams(text, subtitle=subtitle, anchor="start")


LABEL_SLACK_PX_PER_CHAR = 2.5
"""Extra room per character of the longest axis label. vl-convert measures labels with its own
bundled font; a browser shows the SVG in its own `sans-serif` (DejaVu Sans on Debian is ~20%
wider), which pushed the longest right-aligned labels past the left edge ("ustomers")."""


def _label_padding(labels: list[str]) -> dict[str, int]:
    """Chart padding with room for axis labels drawn in a wider font than measured."""
    longest = max((len(label) for label in labels), default=0)
    return {
        "left": 5 + round(longest * LABEL_SLACK_PX_PER_CHAR),
        "top": 5,
        "right": 24,
        "bottom": 5,
    }


def pass_rate_by_family(summary: RunSummary) -> dict[str, Any]:
    rows = [
        {
            "family": name,
            "pass_rate": t.pass_rate if t.pass_rate is not None else 0.0,
            "label": f"{t.passed}/{t.attempted}" if t.attempted else "n/a (none attempted)",
        }
        for name, t in summary.breakdowns["family"]
    ]
    base = alt.Chart(alt.InlineData(values=rows)).encode(
        y=alt.Y("family:N", title=None, sort=None),
        x=alt.X(
            "pass_rate:Q", title="pass rate (passed / attempted)", scale=alt.Scale(domain=[0, 1])
        ),
    )
    bars = base.mark_bar(color=PALETTE["pass"])
    text = base.mark_text(align="left", dx=4).encode(text="label:N")
    layered = (bars + text).properties(
        title=_title("Pass rate by family", summary),
        width=360,
        padding=_label_padding([str(r["family"]) for r in rows]),
    )
    spec: dict[str, Any] = layered.to_dict()
    return spec


def outcome_breakdown(summary: RunSummary) -> dict[str, Any]:
    rows = [
        {"split": split, "outcome": outcome, "trials": n, "rank": _rank(outcome)}
        for split, t in summary.breakdowns["split"]
        for outcome, n in t.outcomes.items()
    ]
    present = [o for o in OUTCOME_ORDER if any(r["outcome"] == o for r in rows)]
    spec: dict[str, Any] = (
        alt.Chart(alt.InlineData(values=rows))
        .mark_bar()
        .encode(
            y=alt.Y("split:N", title="split"),
            x=alt.X("trials:Q", title="trials", stack="zero"),
            color=alt.Color(
                "outcome:N",
                sort=present,
                scale=alt.Scale(
                    domain=present or ["pass"],
                    range=[PALETTE.get(o, "#000000") for o in present or ["pass"]],
                ),
            ),
            order=alt.Order("rank:Q"),
        )
        .properties(
            title=_title("Outcome breakdown", summary),
            width=360,
            padding=_label_padding([str(r["split"]) for r in rows] + ["split"]),
        )
        .to_dict()
    )
    return spec


def latency_distribution(summary: RunSummary) -> dict[str, Any]:
    rows = [
        {"latency_s": float(r["latency_s"]), "outcome": str(r["outcome"])}
        for r in summary.run.records
        if r.get("latency_s") is not None
    ]
    spec: dict[str, Any] = (
        alt.Chart(alt.InlineData(values=rows))
        .mark_bar()
        .encode(
            x=alt.X("latency_s:Q", bin=alt.Bin(maxbins=20), title="latency per trial (s)"),
            y=alt.Y("count():Q", title="trials", axis=alt.Axis(tickMinStep=1)),
        )
        .properties(title=_title("Latency distribution", summary), width=360, height=200)
        .to_dict()
    )
    return spec


def chart_specs(summary: RunSummary) -> dict[str, tuple[str, dict[str, Any]]]:
    """name -> (title, Vega-Lite spec) for every scorecard chart."""
    charts: dict[str, tuple[str, dict[str, Any]]] = {
        "pass_rate_by_family": ("Pass rate by family", pass_rate_by_family(summary)),
        "outcome_breakdown": ("Outcome breakdown", outcome_breakdown(summary)),
        "latency_distribution": ("Latency distribution", latency_distribution(summary)),
    }
    return charts


def render_charts(summary: RunSummary, out_dir: Path) -> list[ChartFile]:
    """Write `<name>.svg` and `<name>.png` for every chart into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for name, (title, spec) in chart_specs(summary).items():
        svg, png = out_dir / f"{name}.svg", out_dir / f"{name}.png"
        svg.write_text(vlc.vegalite_to_svg(spec, allowed_base_urls=[]), encoding="utf-8")
        png.write_bytes(vlc.vegalite_to_png(spec, scale=2, allowed_base_urls=[]))
        files.append(ChartFile(name, title, svg, png))
    return files
