"""What pytest's own reports show: the terminal header and summary, JUnit user properties
and pytest-html columns and extras.

`header_lines` and `summary_lines` are the terminal's `backintel:` lines.
`junit_properties` turns a run record into the item's JUnit properties (every scenario item
carries `outcome`). `HtmlReport` is registered by the plugin only when pytest-html is active
(`--html`): it adds outcome, family and store columns and, per item, the question, the
answer, each evidence item with its re-execution result and a link to the trial's trace.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Generator, Sequence
from dataclasses import replace
from html import escape
from pathlib import Path
from typing import Any

import pytest

from pytest_backintel.options import BenchOptions, analyst_label
from pytest_backintel.outcomes import BLOCKED
from pytest_backintel.records.prices import price_warnings
from pytest_backintel.records.writer import no_usage_warning, probe_warnings, unguarded_lines

__all__ = [
    "COLUMNS",
    "RECORD_KEY",
    "HtmlReport",
    "header_lines",
    "item_extras",
    "junit_properties",
    "summary_lines",
]

RECORD_KEY = pytest.StashKey[dict[str, Any]]()
"""The item's run record, kept for the report hooks."""
_SHOWN_KEY = pytest.StashKey[bool]()
COLUMNS = ("outcome", "family", "store")
"""pytest-html columns, read from the item's JUnit properties."""


_OWN = ("backintel: analyst ", "backintel: WARNING: no price for model")
"""The header lines of a matrix that belong to one model."""


def header_lines(opts: BenchOptions, run_dir: Path, sandbox: dict[str, Any]) -> list[str]:
    """The terminal header: analyst (and its label), store, trials, run folder, sandbox; for a
    model matrix a line per model."""
    if opts.models:
        each = [
            header_lines(replace(opts, model=m, models=()), run_dir, sandbox) for m in opts.models
        ]
        own = [line for lines in each for line in lines if line.startswith(_OWN)]
        head = f"backintel: model matrix of {len(each)} models: each trial once per model, "
        head += f"a run folder per model under {run_dir}"
        return [head, *own, *(line for line in each[0] if not line.startswith(_OWN))]
    who = opts.model if opts.analyst == "model" else opts.analyst
    lines = [
        f"backintel: analyst {who}"
        + (f" ({label})" if (label := analyst_label(opts.analyst)) else ""),
        f"backintel: store per dataset, named after collection (--store {opts.store} serves "
        f"the registered worlds), trials {opts.trials}, run {run_dir}",
    ]
    lines += price_warnings(opts.model, opts.analyst, opts.run_limits, opts.limits.max_cost_usd)
    if opts.analyst == "model":
        from pytest_backintel.records.method_hash import model_api_of

        where = f" at {opts.model_base_url}" if opts.model_base_url else ""
        lines[0] += f" (API {model_api_of(opts)}{where})"
    if opts.analyst == "reference" and not opts.model:
        lines[0] += "; no model configured (--model or BACKINTEL_MODEL)"
    lines.append(f"backintel: sandbox {sandbox['backend']}")
    if sandbox["unsafe"]:
        lines.append(f"backintel: WARNING: UNSAFE SANDBOX: {sandbox['warning']}")
    return lines


def summary_lines(
    outcomes: Counter[str],
    run_dir: Path,
    records: Sequence[dict[str, Any]] = (),
    stop_message: str | None = None,
) -> list[str]:
    """The terminal summary: outcome counts (blocked apart), pass rates by split, level and
    family, why the run stopped early, unmeasured usage, and where the records are."""
    if not outcomes:
        return []

    counts = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items()))
    lines = [f"backintel: {counts}"]
    blocked = sum(n for o, n in outcomes.items() if o in {b.value for b in BLOCKED})
    if blocked:
        lines.append(
            f"backintel: {blocked} blocked (infra_error, provider_error): not the analyst's "
            "fault, not counted as failed answers"
        )
    lines += _rate_lines(records)
    if stop_message:
        lines.append(f"backintel: STOPPED: {stop_message}")
    unmetered = sum(1 for r in records if (r.get("usage") or {}).get("tokens_reported") is False)
    if warning := no_usage_warning(unmetered):
        lines.append(f"backintel: WARNING: {warning}")
    lines += [f"backintel: WARNING: {w}" for w in probe_warnings(list(records))]
    lines += unguarded_lines(list(records))
    unguarded = sum(1 for r in records if r.get("probe_unguarded"))
    last = f"backintel: records in {run_dir}"
    return [*lines, last + (f"; {unguarded} trial(s) UNGUARDED" if unguarded else "")]


def _rate_lines(records: Sequence[dict[str, Any]]) -> list[str]:
    """Pass rates with their 95% intervals: overall, by split, level and family; pass^k."""
    if not records:
        return []
    from pytest_backintel.records.intervals import rate_interval
    from pytest_backintel.records.rates import outcomes_by_case, pass_k_intervals
    from pytest_backintel.records.tally import DIMENSIONS, tally

    overall = rate_interval(outcomes_by_case(records))
    lines = [f"backintel: pass rate {overall.percent()}"] if overall.estimate is not None else []
    for dim in ("split", "level", "family"):
        groups: dict[str, list[dict[str, Any]]] = {}
        for record in records:
            groups.setdefault(DIMENSIONS[dim](record), []).append(record)
        rates = []
        for name, group in sorted(groups.items()):
            t = tally(group)
            rate = "n/a" if t.pass_rate is None else f"{t.pass_rate:.0%}"
            bounds = rate_interval(outcomes_by_case(group)).bounds("{:.0%}")
            rates.append(f"{name} {t.passed}/{t.attempted} ({rate}{' ' * bool(bounds)}{bounds})")
        if rates:
            lines.append(f"backintel: pass rate by {dim}: " + ", ".join(rates))
    if pass_k := pass_k_intervals(outcomes_by_case(records)):
        shown = ", ".join(
            f"k={k} {v.estimate:.2f} {v.bounds('{:.2f}')}".rstrip()
            for k, v in pass_k.items()
            if v.estimate is not None
        )
        lines.append(f"backintel: pass^k {shown}")
    if len(lines) > 1:
        lines.append(
            "backintel: intervals 95%: Wilson with one trial per case, cluster-robust over cases "
            "with several (run.json `intervals` has every rate)"
        )
    return lines


def junit_properties(record: dict[str, Any]) -> list[tuple[str, str]]:
    """The JUnit user properties of one trial's record."""
    reasons = "; ".join(r["message"] for r in record.get("reasons", []))
    return [
        ("outcome", record["outcome"]),
        ("reasons", reasons),
        ("family", record["family"]),
        ("split", record["split"]),
        ("level", str(record["level"])),
        ("store", record.get("store", record["backend"])),
        ("analyst", record["analyst"]["name"]),
        ("model", record.get("model") or ""),
        ("trial", str(record["trial"])),
    ]


def junit_run_properties(records: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """The run's pass rate, overall and per split, with its 95% interval and method: JUnit
    testsuite properties (`backintel_pass_rate`, `backintel_pass_rate_low`, ..._high,
    ..._method; the same with `[split]` appended per split)."""
    from pytest_backintel.records.intervals import rate_interval
    from pytest_backintel.records.rates import outcomes_by_case

    out = []
    splits = sorted({str(r.get("split", "unknown")) for r in records})
    groups = [("", list(records))] + [
        (f"[{s}]", [r for r in records if str(r.get("split", "unknown")) == s]) for s in splits
    ]
    for suffix, group in groups:
        ci = rate_interval(outcomes_by_case(group))
        if ci.estimate is None or ci.low is None or ci.high is None:
            continue
        out += [
            (f"backintel_pass_rate{suffix}", f"{ci.estimate:.4f}"),
            (f"backintel_pass_rate_low{suffix}", f"{ci.low:.4f}"),
            (f"backintel_pass_rate_high{suffix}", f"{ci.high:.4f}"),
            (f"backintel_pass_rate_method{suffix}", ci.method),
        ]
    return out


def _pre(text: str) -> str:
    return f"<pre>{escape(text)}</pre>"


def _evidence_html(evidence: list[dict[str, Any]]) -> str:
    if not evidence:
        return "<p>no evidence re-executed</p>"
    parts = []
    for ev in evidence:
        reproduced = ev.get("reproduced") or {}
        if ev.get("error"):
            state = f"error: {ev['error']}"
        elif not ev.get("ran"):
            state = "not run"
        else:
            state = (
                ", ".join(
                    f"{name} {'reproduced' if ok else 'NOT reproduced'}"
                    for name, ok in reproduced.items()
                )
                or "ran, cites no metric"
            )
        cites = ", ".join(ev.get("cited") or [])
        values = json.dumps(ev.get("values") or {}, sort_keys=True, default=str)
        parts.append(
            f"<h4>evidence {escape(str(ev.get('id')))} ({escape(str(ev.get('kind')))}, "
            f"cites {escape(cites)}): {escape(state)}</h4>"
            f"{_pre(str(ev.get('code', '')))}<p>re-executed values: {escape(values)}</p>"
        )
    return "".join(parts)


def item_extras(question: str, record: dict[str, Any], traces_href: str) -> list[dict[str, Any]]:
    """pytest-html extras for one trial: question, answer, evidence and the trace link."""
    from pytest_html import extras  # type: ignore[import-untyped]

    answer = record.get("answer")
    answer_text = json.dumps(answer, indent=2, sort_keys=True) if answer else "(no contract answer)"
    body = (
        f'<div class="backintel">'
        f"<h3>outcome: {escape(record['outcome'])}</h3>"
        f"<h4>question</h4>{_pre(question.strip())}"
        f"<h4>answer</h4>{_pre(answer_text)}"
        f"{_evidence_html(record.get('evidence') or [])}"
        f"<p>trace id: {escape(record.get('trace_id') or 'none')}</p></div>"
    )
    found: list[dict[str, Any]] = [extras.html(body)]
    if record.get("trace_id"):
        found.append(extras.url(traces_href, name=f"trace {record['trace_id']}"))
    return found


class HtmlReport:
    """pytest-html hooks; registered as a plugin only when `--html` is given."""

    def __init__(self, traces_file: Path, html_path: str) -> None:
        report_dir = Path(html_path).expanduser().resolve().parent
        self.traces_href = Path(os.path.relpath(traces_file, report_dir)).as_posix()

    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        for offset, name in enumerate(COLUMNS):
            cells.insert(
                2 + offset, f'<th class="sortable" data-column-type="{name}">{name.title()}</th>'
            )

    def pytest_html_results_table_row(self, report: pytest.TestReport, cells: list[str]) -> None:
        props = dict(report.user_properties)
        for offset, name in enumerate(COLUMNS):
            value = escape(str(props.get(name, "")))
            cells.insert(2 + offset, f'<td class="col-{name}">{value}</td>')

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, None]:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        record = item.stash.get(RECORD_KEY, None)
        if record is None or item.stash.get(_SHOWN_KEY, False):
            return
        item.stash[_SHOWN_KEY] = True
        question = str(getattr(getattr(item, "scenario", None), "question", ""))
        report.extras = [  # type: ignore[attr-defined]
            *getattr(report, "extras", []),
            *item_extras(question, record, self.traces_href),
        ]
