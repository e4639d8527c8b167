"""Records of trials an interrupted run wrote but pytest never reported.

A graceful stop (SIGINT, Ctrl-C) can land between a trial's record and pytest's report of it:
in the reporting process after the record is written, or under xdist in a worker whose report
the controller, already stopping, no longer counts. Such a record would count a trial pytest
did not. At the end of an interrupted session the controller rewrites each of them as
`not_run` (blocked: `--retry-blocked` runs it again), keeping what it had ended as in
`interrupted_outcome`, so the records and pytest's counts agree.
"""

from __future__ import annotations

import json
from collections.abc import Set
from pathlib import Path
from typing import Any

from pytest_backintel.records.writer import read_json_lines, write_json_lines

__all__ = ["counts_in_pytest", "mark_unreported", "part_lengths"]


def counts_in_pytest(when: str, passed: bool) -> bool:
    """Whether a report of this phase makes pytest count its item (passed, failed, skipped):
    the call phase always, a setup or teardown only when it did not pass."""
    return when == "call" or not passed


def _interrupted(record: dict[str, Any]) -> dict[str, Any]:
    was = record.get("outcome")
    reason = {
        "outcome": "not_run",
        "message": (
            f"the run was interrupted (SIGINT) before pytest reported this trial; it had ended "
            f"as {was}, which is kept in interrupted_outcome and counted nowhere"
        ),
        "metric": None,
    }
    reasons = [reason, *record.get("reasons", [])]
    return record | {"outcome": "not_run", "interrupted_outcome": was, "reasons": reasons}


def part_lengths(run_dir: Path) -> dict[str, int]:
    """Records each part file holds now (taken when a session starts: what earlier sessions of
    a resumed or appended run wrote is never this session's to mark)."""
    return {
        part.name: len(read_json_lines(part))
        for part in sorted((run_dir / "parts").glob("records-*.jsonl"))
    }


def mark_unreported(run_dir: Path, reported: Set[str], before: dict[str, int]) -> list[str]:
    """Rewrite, in every part file of `run_dir`, the records this session wrote (past the
    `before` lengths) whose item pytest did not report (not in `reported`) as interrupted;
    their item ids."""
    marked: list[str] = []
    for part in sorted((run_dir / "parts").glob("records-*.jsonl")):
        rows = read_json_lines(part)
        changed = False
        lines = []
        for n, (record, line) in enumerate(rows):
            nodeid = record.get("nodeid")
            if n >= before.get(part.name, 0) and nodeid is not None and nodeid not in reported:
                record = _interrupted(record)
                line = json.dumps(record, sort_keys=True)
                marked.append(nodeid)
                changed = True
            lines.append(line)
        if changed:
            write_json_lines(part, lines)
    return marked
