"""The data the viewer is built from: a slim row per trial for the list (kept small so 10,000
trials filter quickly), the full detail of each trial (read only when a trial is opened), and
the run's headline numbers.

Every string an analyst produced is passed on as bounded text (`reports.view.text`); the page
shows it with `textContent`, never as markup.
"""

from __future__ import annotations

from typing import Any

from reports.load import Run
from reports.summary import RunSummary, backend_of
from reports.view.text import CODE_LIMIT, as_text, clip
from reports.view.transcript import transcript

__all__ = [
    "QUESTION_LIMIT",
    "headline",
    "question_of",
    "run_rows",
    "tokens_of",
    "trial_detail",
    "trial_row",
]

QUESTION_LIMIT = 4_000
SCORING_HEADING = "\n\n## How your answer is scored"


def question_of(record: dict[str, Any]) -> str:
    """The question asked: the record's `question`, else (records written before it was
    recorded) the first user prompt of the transcript without the scoring appendix."""
    question = record.get("question")
    if isinstance(question, str):
        return question
    for message in record.get("messages") or []:
        parts = message.get("parts") if isinstance(message, dict) else None
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, dict) and part.get("part_kind") == "user-prompt":
                content = part.get("content")
                if isinstance(content, str):
                    return content.split(SCORING_HEADING, 1)[0]
    return ""


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def tokens_of(record: dict[str, Any]) -> int | None:
    """Input plus output tokens; None when the provider reported none."""
    usage = record.get("usage") or {}
    if not isinstance(usage, dict) or usage.get("tokens_reported") is False:
        return None
    parts = [usage.get("input_tokens"), usage.get("output_tokens")]
    known = [int(p) for p in parts if isinstance(p, int)]
    return sum(known) if known else None


def trial_row(n: int, record: dict[str, Any]) -> dict[str, Any]:
    """What the trial list needs of one trial (short keys: a 10,000-trial index stays small)."""
    return {
        "n": n,
        "case": str(record.get("scenario_id")),
        "trial": record.get("trial", 0),
        "outcome": str(record.get("outcome")),
        "split": str(record.get("split", "unknown")),
        "level": str(record.get("level", "unknown")),
        "family": str(record.get("family", "unknown")),
        "store": backend_of(record),
        "latency_s": _number(record.get("latency_s")),
        "tokens": tokens_of(record),
        "cost_usd": _number(record.get("cost_usd")),
    }


def _answer(answer: Any) -> dict[str, Any] | None:
    if not isinstance(answer, dict):
        return None if answer is None else {"status": "unreadable", "raw": as_text(answer)}
    found = answer.get("metrics")
    metrics: list[Any] = found if isinstance(found, list) else []
    return {
        "status": as_text(answer.get("status", "")),
        "metrics": [
            {
                "name": as_text(m.get("name")),
                "value": as_text(m.get("value")),
                "unit": as_text(m.get("unit") or ""),
            }
            for m in metrics
            if isinstance(m, dict)
        ],
        "method": as_text(answer.get("method") or ""),
        "caveats": [as_text(c) for c in answer.get("caveats") or []],
        "missing": [as_text(m) for m in answer.get("missing") or []],
        "explanation": as_text(answer.get("explanation") or ""),
    }


def _check(check: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": as_text(check.get("name")),
        "kind": as_text(check.get("kind", "")),
        "expected": as_text(check.get("expected")),
        "reported": as_text(check.get("got")),
        "tolerance": check.get("tolerance"),
        "value_ok": bool(check.get("value_ok")),
        "evidence_ok": bool(check.get("evidence_ok")),
        "verdict": "pass" if check.get("value_ok") and check.get("evidence_ok") else "fail",
        "detail": as_text(check.get("detail") or ""),
    }


def _probe(probe: dict[str, Any]) -> dict[str, Any]:
    return {
        "probe": probe.get("probe"),
        "values": as_text(probe.get("values")) if "values" in probe else "",
        "expected": as_text(probe.get("expected")) if "expected" in probe else "",
        "followed": {str(k): bool(v) for k, v in (probe.get("followed") or {}).items()},
        "error": as_text(probe.get("error") or ""),
        "skipped": as_text(probe.get("skipped") or ""),
    }


def _evidence(item: dict[str, Any]) -> dict[str, Any]:
    reproduced = item.get("reproduced") or {}
    details = item.get("details") or {}
    cited = [str(c) for c in item.get("cited") or []]
    return {
        "id": as_text(item.get("id")),
        "kind": as_text(item.get("kind")),
        "code": as_text(item.get("code") or "", CODE_LIMIT),
        "cited": [as_text(c) for c in cited],
        "ran": bool(item.get("ran")),
        "error": as_text(item.get("error") or ""),
        "values": as_text(item.get("values") or {}),
        "accepted": bool(item.get("ran")) and not item.get("error") and all(reproduced.values()),
        "metrics": [
            {
                "name": as_text(name),
                "reproduced": bool(reproduced.get(name)),
                "why": as_text(details.get(name) or ("reproduced" if reproduced.get(name) else "")),
            }
            for name in sorted({*cited, *map(str, reproduced)})
        ],
        "probes": [_probe(p) for p in item.get("probes") or [] if isinstance(p, dict)],
    }


def _judge(judge: Any) -> dict[str, Any] | None:
    if not isinstance(judge, dict):
        return None
    return {"calibrated": False, "fields": {str(k): as_text(v) for k, v in judge.items()}}


def trial_detail(n: int, record: dict[str, Any]) -> dict[str, Any]:
    """Everything the page shows when trial `n` is opened."""
    usage = record.get("usage") if isinstance(record.get("usage"), dict) else None
    return {
        **trial_row(n, record),
        "nodeid": as_text(record.get("nodeid") or ""),
        "answerable": record.get("answerable"),
        "question": clip(question_of(record), QUESTION_LIMIT),
        "reasons": [
            {
                "outcome": as_text(r.get("outcome")),
                "metric": as_text(r.get("metric") or ""),
                "message": as_text(r.get("message")),
            }
            for r in record.get("reasons") or []
            if isinstance(r, dict)
        ],
        "answer": _answer(record.get("answer")),
        "checks": [_check(c) for c in record.get("checks") or [] if isinstance(c, dict)],
        "evidence": [_evidence(e) for e in record.get("evidence") or [] if isinstance(e, dict)],
        "refusal": record.get("refusal"),
        "judge": _judge(record.get("judge")),
        "usage": {str(k): v for k, v in usage.items()} if usage else None,
        "retries": [as_text(r) for r in record.get("provider_retries") or []],
        "analyst_error": as_text(record.get("analyst_error") or ""),
        "warnings": [as_text(w) for w in record.get("warnings") or []],
        "transcript": transcript(record),
    }


def interval_text(value: dict[str, Any] | None, fmt: str) -> str:
    """`[51.0%, 72.0%] (Wilson 95%)` from a run.json interval; empty when there is none."""
    if not value or value.get("low") is None or value.get("high") is None:
        return ""
    return f"[{fmt.format(value['low'])}, {fmt.format(value['high'])}] ({value['method']})"


def rate_rows(intervals: dict[str, Any]) -> list[list[str]]:
    """[figure, estimate, interval with method] for every rate the run has an interval for."""
    rows: list[list[str]] = []

    def add(label: str, value: dict[str, Any] | None, fmt: str) -> None:
        if value and value.get("estimate") is not None:
            rows.append([label, fmt.format(value["estimate"]), interval_text(value, fmt)])

    add("pass rate", intervals.get("pass_rate"), "{:.1%}")
    for dim, groups in (intervals.get("by") or {}).items():
        for name, value in groups.items():
            add(f"pass rate, {dim} {name}", value, "{:.1%}")
    for k, value in (intervals.get("pass_k") or {}).items():
        add(f"pass^{k}", value, "{:.3f}")
    add("refusal accuracy", intervals.get("refusal_accuracy"), "{:.1%}")
    add("cost per solved case (USD)", intervals.get("cost_per_solved_usd"), "{:.4f}")
    for q, value in (intervals.get("latency_s") or {}).items():
        add(f"latency {q} (s)", value, "{:.3f}")
    return rows


def headline(summary: RunSummary) -> dict[str, Any]:
    """The run's headline numbers, as the scorecard counts them."""
    run, t, usage = summary.run, summary.overall, summary.usage
    return {
        "run_id": run.run_id,
        "analyst": run.analyst_name,
        "model": run.model,
        "banners": run.banners,
        "warnings": run.warnings,
        "trials": t.trials,
        "attempted": t.attempted,
        "passed": t.passed,
        "failed": t.failed,
        "blocked": t.blocked,
        "not_run": t.not_run,
        "pass_rate": t.pass_rate,
        "pass_rate_interval": interval_text(summary.intervals.get("pass_rate"), "{:.1%}"),
        "rates": rate_rows(summary.intervals),
        "outcomes": t.outcomes,
        "latency_median_s": summary.latency.median_s,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cost_usd": usage.cost_usd,
    }


def run_rows(run: Run) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The list rows of every trial and each case's question (stored once per case)."""
    rows = [trial_row(n, r) for n, r in enumerate(run.records)]
    questions: dict[str, str] = {}
    for record in run.records:
        questions.setdefault(str(record.get("scenario_id")), clip(question_of(record), 2_000))
    return rows, questions
