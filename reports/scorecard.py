"""Render a run's scorecard as Markdown and HTML from the jinja2 templates in `templates/`.

Every page carries the run's banners (calibration, replay). Nothing time-dependent is added
beyond what the run folder records, so the same run always renders the same text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reports.charts import ChartFile
from reports.summary import RunSummary
from reports.templating import TEMPLATES, interval, pct

__all__ = ["pct", "render_html", "render_markdown", "scorecard_context"]


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f} s"


def _stores(header: dict[str, Any]) -> str:
    """The stores the trials ran on (a source of your own runs on its own backend, whatever
    `--store` said), with `--store` when it differs."""
    asked = str(header.get("store_backend", "unknown"))
    used = [str(s) for s in header.get("stores_used") or []]
    if not used or used == [asked]:
        return asked
    return f"{', '.join(used)} (--store {asked})"


def _facts(summary: RunSummary) -> list[tuple[str, str]]:
    run, header = summary.run, summary.run.header
    analyst = header.get("analyst") or {}
    git = header.get("git") or {}
    sha = git.get("sha") or "unknown"
    dirty = {True: " (dirty work tree)", False: "", None: ""}.get(git.get("dirty"), "")
    hashes = ", ".join(f"{w}: {h[:16]}" for w, h in run.data_hashes.items()) or "none recorded"
    return [
        ("analyst", run.analyst_name),
        ("analyst label", str(analyst.get("label", "unknown"))),
        ("model", run.model or "none"),
        ("store backend", _stores(header)),
        ("trials per case (planned)", str(header.get("trials", "unknown"))),
        ("frozen run", "yes" if header.get("freeze") else "no"),
        ("harness version", str(header.get("harness_version", "unknown"))),
        ("git", f"{sha}{dirty}"),
        ("method hash", str(header.get("method_hash") or "unknown")[:16]),
        ("scenario hash", run.scenario_hash[:16]),
        ("data hashes", hashes),
        ("started", str(header.get("started_at", "unknown"))),
        ("finished", str(header.get("finished_at", "not recorded"))),
    ]


def _with_interval(value: dict[str, Any] | None, fmt: str) -> str:
    if not value or value.get("estimate") is None:
        return "n/a"
    bounds = interval(value, fmt)
    return f"{fmt.format(value['estimate'])} {bounds} ({value['method']})".replace("  ", " ")


def _interval_rows(summary: RunSummary) -> list[tuple[str, str]]:
    """Latency percentiles, cost per solved case and refusal accuracy with their intervals."""
    found = summary.intervals
    if not found:
        return []
    latency = found.get("latency_s") or {}
    rows = [(f"latency {q}", _with_interval(latency.get(q), "{:.3f} s")) for q in ("p50", "p90")]
    rows.append(
        ("cost per solved case (USD)", _with_interval(found.get("cost_per_solved_usd"), "${:.4f}"))
    )
    rows.append(
        (
            "refusal accuracy (unanswerable cases)",
            _with_interval(found.get("refusal_accuracy"), "{:.1%}"),
        )
    )
    return rows


def _usage_rows(summary: RunSummary) -> list[tuple[str, str]]:
    lat, use = summary.latency, summary.usage
    rng = "n/a" if lat.min_s is None else f"{lat.min_s:.3f} – {lat.max_s:.3f} s"
    cost = "unknown" if use.cost_usd is None else f"${use.cost_usd:.4f}"
    unknown = f" + unknown ({use.unreported_trials} trial(s) reported no usage)"
    more = unknown if use.unreported_trials else ""
    return [
        ("latency median", _seconds(lat.median_s)),
        ("latency range", rng),
        ("trials timed", str(lat.count)),
        ("model requests", str(use.requests)),
        ("input tokens", f"{use.input_tokens}{more}"),
        ("output tokens", f"{use.output_tokens}{more}"),
        ("tool calls", str(use.tool_calls)),
        (f"cost (USD, prices as of {use.prices_as_of})", cost),
        *_interval_rows(summary),
    ]


def _failures(summary: RunSummary) -> list[dict[str, Any]]:
    out = []
    for r in summary.run.records:
        if r["outcome"] == "pass":
            continue
        reasons = "; ".join(str(x.get("message", "")) for x in r.get("reasons") or [])
        out.append(
            {
                "case": r["scenario_id"],
                "trial": r.get("trial", 0),
                "outcome": r["outcome"],
                "reasons": reasons or "no reason recorded",
            }
        )
    return out


def scorecard_context(summary: RunSummary, charts: list[ChartFile]) -> dict[str, Any]:
    """Everything the templates show, as plain values."""
    t = summary.overall
    overall_line = (
        f"{t.trials} trials: {t.attempted} attempted, {t.passed} passed, {t.failed} failed, "
        f"{t.blocked} blocked (infra_error, provider_error), {t.not_run} not run; "
        f"pass rate {pct(t.pass_rate)} of attempted"
    )
    rate = summary.intervals.get("pass_rate") or {}
    overall_line += (
        f"; 95% interval {interval(rate)} ({rate['method']})."
        if rate.get("low") is not None
        else "."
    )
    if n := summary.run.retried:
        overall_line += (
            f" {n} trial(s) retried after a blocked attempt (--retry-blocked; the earlier "
            "attempts are kept in their records)."
        )
    columns = sorted({k for values in summary.pass_k.values() for k in values})
    return {
        "run_id": summary.run.run_id,
        "banners": summary.run.banners,
        "facts": _facts(summary),
        "overall": t,
        "overall_line": overall_line,
        "reviews": summary.reviews,
        "breakdowns": list(summary.breakdowns.items()),
        "usage_rows": _usage_rows(summary),
        "pass_k": sorted(summary.pass_k.items()),
        "pass_k_intervals": summary.intervals.get("pass_k_by_split", {}),
        "by_interval": summary.intervals.get("by", {}),
        "pass_k_columns": columns,
        "cases": summary.cases,
        "failures": _failures(summary),
        "charts": charts,
        "warnings": summary.run.warnings,
    }


def render_markdown(summary: RunSummary, charts: list[ChartFile]) -> str:
    return TEMPLATES.get_template("scorecard.md.j2").render(scorecard_context(summary, charts))


def render_html(summary: RunSummary, charts: list[ChartFile]) -> str:
    return TEMPLATES.get_template("scorecard.html.j2").render(scorecard_context(summary, charts))


def write_scorecards(summary: RunSummary, charts: list[ChartFile], out_dir: Path) -> list[Path]:
    """Write `scorecard.md` and `scorecard.html` into `out_dir`."""
    md, html = out_dir / "scorecard.md", out_dir / "scorecard.html"
    md.write_text(render_markdown(summary, charts), encoding="utf-8")
    html.write_text(render_html(summary, charts), encoding="utf-8")
    return [md, html]
