"""A person's review of a trial, kept apart from the records.

`backintel review RUN CASE_KEY --outcome pass|fail --reason TEXT [--author NAME]` appends one
line to `RUN/reviews.jsonl`: the case key (`scenario-id/tN`, or the scenario id when the case
has one trial), the recorded outcome, the outcome before this review (an earlier review's, or
the recorded one), the new outcome, the reason, the author (`--author`, else `git config
user.name`) and the time. `records.jsonl` is never rewritten, and neither is a review line.

Reports count overrides apart and use them only when asked (`--with-reviews`): then a reviewed
trial's outcome is its last review's (`pass`, or for `fail` the recorded failure, or
`reviewed_fail` when the recorded outcome was a pass), and its record carries `review` with the
original outcome and the history. A blocked or not-run trial was not measured: it cannot be
reviewed.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_backintel.records.tally import NOT_ATTEMPTED
from reports.load import Run, read_jsonl

__all__ = [
    "REVIEWED_FAIL",
    "REVIEWS_FILE",
    "ReviewError",
    "append_review",
    "apply_reviews",
    "git_author",
    "read_reviews",
    "review_note",
    "reviews_by_trial",
    "trial_key",
]

REVIEWS_FILE = "reviews.jsonl"
REVIEWED_FAIL = "reviewed_fail"


class ReviewError(Exception):
    """A review cannot be recorded; the message names what and what is allowed."""


def trial_key(record: dict[str, Any]) -> str:
    """`scenario-id/tN`: the key a review names one trial by."""
    return f"{record['scenario_id']}/t{int(record.get('trial', 0))}"


def read_reviews(run: Path) -> list[dict[str, Any]]:
    """Every review line of a run folder, in the order written ([] when none)."""
    path = run / REVIEWS_FILE
    return read_jsonl(path, REVIEWS_FILE)[0] if path.is_file() else []


def reviews_by_trial(run: Path) -> dict[str, list[dict[str, Any]]]:
    """trial key -> its reviews, oldest first."""
    out: dict[str, list[dict[str, Any]]] = {}
    for review in read_reviews(run):
        out.setdefault(str(review.get("case_key")), []).append(review)
    return out


def git_author() -> str | None:
    """`git config user.name`, or None when git or the name is missing."""
    try:
        done = subprocess.run(
            ["git", "config", "user.name"], capture_output=True, text=True, check=False, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def _effective(original: str, reviewed: str) -> str:
    if reviewed == "pass":
        return "pass"
    return REVIEWED_FAIL if original == "pass" else original


def _find(run: Run, key: str) -> dict[str, Any]:
    by_key = {trial_key(r): r for r in run.records}
    if key in by_key:
        return by_key[key]
    trials = [r for r in run.records if r["scenario_id"] == key]
    if len(trials) == 1:
        return trials[0]
    if trials:
        keys = ", ".join(sorted(trial_key(r) for r in trials))
        raise ReviewError(f"case {key!r} has {len(trials)} trials: name one of {keys}")
    raise ReviewError(
        f"no trial {key!r} in {run.path}: a case key is scenario-id/tN "
        f"(e.g. {next(iter(sorted(by_key)), 'my-case/t1')})"
    )


def append_review(
    run: Run, key: str, outcome: str, reason: str, author: str | None
) -> dict[str, Any]:
    """Append one review to `run`'s `reviews.jsonl` and return it."""
    if outcome not in ("pass", "fail"):
        raise ReviewError(f"--outcome {outcome!r}: pass or fail")
    if not reason.strip():
        raise ReviewError(
            "--reason: say why the outcome is overridden (an empty reason is not kept)"
        )
    if not author:
        raise ReviewError("no author: pass --author NAME (git config user.name is not set)")
    record = _find(run, key)
    original = str(record["outcome"])
    if original in NOT_ATTEMPTED:
        raise ReviewError(
            f"{trial_key(record)} ended {original}: it was not measured, so there is no outcome "
            "to review (run it again with --retry-blocked)"
        )
    earlier = reviews_by_trial(run.path).get(trial_key(record), [])
    review = {
        "case_key": trial_key(record),
        "scenario_id": record["scenario_id"],
        "trial": int(record.get("trial", 0)),
        "nodeid": record.get("nodeid"),
        "original": original,
        "previous": earlier[-1]["effective"] if earlier else original,
        "outcome": outcome,
        "effective": _effective(original, outcome),
        "reason": reason.strip(),
        "author": author,
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    with (run.path / REVIEWS_FILE).open("a", encoding="utf-8") as out:
        out.write(json.dumps(review, sort_keys=True) + "\n")
    return review


def apply_reviews(run: Run) -> tuple[Run, int]:
    """The run with every reviewed trial's outcome replaced by its last review's (the record
    carries `review`: original outcome and history), and how many trials were overridden."""
    found = reviews_by_trial(run.path)
    if not found:
        return run, 0
    records, changed = [], 0
    for record in run.records:
        history = found.get(trial_key(record))
        if history and str(record["outcome"]) not in NOT_ATTEMPTED:
            original = str(record["outcome"])
            effective = _effective(original, str(history[-1]["outcome"]))
            changed += effective != original
            review = {"original": original, "history": history}
            record = {**record, "outcome": effective, "review": review}
        records.append(record)
    return replace(run, records=records), changed


def review_note(run: Run, used: bool) -> str | None:
    """The line a report prints about reviews: how many trials a person overrode, and whether
    they were used (`--with-reviews`); None when there is no review."""
    found = reviews_by_trial(run.path)
    if not found:
        return None
    n = len(found)
    what = f"{n} trial{'s' * (n != 1)} of {run.run_id} overridden by review ({REVIEWS_FILE})"
    if used:
        return f"reviews: {what}; used (--with-reviews)"
    return f"reviews: {what}; not used: recorded outcomes shown (add --with-reviews to use them)"
