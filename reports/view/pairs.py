"""The comparison view's data, read from whatever `reports.compare.compare_runs` returns.

Suites and cases are serialised field by field (dataclass fields plus the decision
properties they offer), so the page follows `compare` as its result grows new verdicts or
statistics; the page shows every scalar a suite carries.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from reports.load import Run

__all__ = ["comparison_data", "refused_data"]

SUITE_PROPERTIES = ("accepted", "verdict", "decision")
CASE_PROPERTIES = ("change",)
RESULT_PROPERTIES = ("accepted", "verdict", "decision", "no_change")


def _plain(value: Any) -> Any:
    """A JSON-safe rendering of a statistic (nested dicts and lists kept; odd floats named)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if callable(getattr(value, "text", None)):
        return value.text()  # an interval or paired difference: `+0.10 [+0.02, +0.18] (method)`
    return str(value)


def _properties(obj: Any, names: tuple[str, ...]) -> dict[str, Any]:
    out = {}
    for name in names:
        if isinstance(getattr(type(obj), name, None), property):
            out[name] = _plain(getattr(obj, name))
    return out


def _case_side(case: Any) -> dict[str, Any]:
    return {
        "outcomes": _plain(getattr(case, "outcomes", [])),
        "passed": _plain(getattr(case, "passed", None)),
    }


def _trials_by_case(run: Run) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for n, record in enumerate(run.records):
        found.setdefault(str(record.get("scenario_id")), []).append(n)
    return found


def _case(change: Any, base: dict[str, list[int]], cand: dict[str, list[int]]) -> dict[str, Any]:
    case_id = str(getattr(change, "scenario_id", ""))
    return {
        "case": case_id,
        **_properties(change, CASE_PROPERTIES),
        "baseline": _case_side(getattr(change, "baseline", None)),
        "candidate": _case_side(getattr(change, "candidate", None)),
        "baseline_trials": base.get(case_id, []),
        "candidate_trials": cand.get(case_id, []),
    }


def _suite(suite: Any, base: dict[str, list[int]], cand: dict[str, list[int]]) -> dict[str, Any]:
    stats: dict[str, Any] = {}
    if dataclasses.is_dataclass(suite):
        for f in dataclasses.fields(suite):
            if f.name != "cases":
                stats[f.name] = _plain(getattr(suite, f.name))
    stats |= _properties(suite, SUITE_PROPERTIES)
    changes = list(getattr(suite, "cases", []))
    cases = [_case(c, base, cand) for c in changes]
    counts: dict[str, int] = {}
    for case in cases:
        key = str(case.get("change", "unknown"))
        counts[key] = counts.get(key, 0) + 1
    return {"stats": stats, "counts": counts, "cases": cases}


def comparison_data(result: Any, baseline: Run, candidate: Run) -> dict[str, Any]:
    """The paired table of every suite, its verdict and statistics, and where each case's
    trials are in either run."""
    base, cand = _trials_by_case(baseline), _trials_by_case(candidate)
    return {
        "refused": None,
        "baseline_id": baseline.run_id,
        "candidate_id": candidate.run_id,
        "result": _properties(result, RESULT_PROPERTIES),
        "suites": [
            _suite(s, base, cand)  # the shipped splits' decisions, then your own suites' verdicts
            for s in [*getattr(result, "suites", []), *getattr(result, "verdicts", [])]
        ],
    }


def refused_data(reason: str, baseline: Run, candidate: Run) -> dict[str, Any]:
    """A comparison `compare` refused: the page says why."""
    return {
        "refused": reason,
        "baseline_id": baseline.run_id,
        "candidate_id": candidate.run_id,
        "result": {},
        "suites": [],
    }
