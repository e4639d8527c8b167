"""Run records: `results/<run-id>/run.json` and `records.jsonl`, safe under xdist.

Each process appends finished trials to its own `parts/records-<worker>.jsonl` (flushed per
line, so an interrupted run keeps every finished trial); the controller merges the parts into
`records.jsonl` sorted by item id when the session ends.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import secrets
import subprocess
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

from pytest_backintel.records.attempts import final_rows

__all__ = [
    "RecordWriter",
    "git_state",
    "hash_files",
    "merge_parts",
    "new_run_id",
    "open_append",
    "package_versions",
    "read_json",
    "read_json_lines",
    "read_records",
    "write_json",
    "write_json_lines",
]

PACKAGES = (
    "backintel-bench",
    "pydantic",
    "pydantic-ai-slim",
    "pytest",
    "pytest-xdist",
    "polars",
    "pyarrow",
    "duckdb",
)


NO_USAGE_TRIAL = (
    "the provider reported no token usage: this trial's tokens and cost are unknown (null), "
    "token and cost budgets cannot count it"
)
"""The warning a trial's record carries when its provider sent no token counts."""


def no_usage_warning(trials: int) -> str | None:
    """The run-level warning for `trials` trials without token counts (None for none)."""
    if not trials:
        return None
    return (
        f"the provider reported no token usage for {trials} trial(s): their tokens and cost "
        "are unknown (null), token and cost budgets cannot count them"
    )


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def git_state(root: Path) -> dict[str, Any]:
    """The commit and whether the work tree differs from it (None outside a checkout)."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip()

    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"sha": sha, "dirty": None if status is None else bool(status)}


def hash_files(paths: list[Path], root: Path | None = None) -> str:
    """sha256 over the files' relative names and bytes, in sorted order (a file removed since
    it was listed is left out)."""
    digest = hashlib.sha256()
    for path in sorted(paths):
        name = str(path.relative_to(root)) if root else path.name
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        digest.update(name.encode() + b"\0" + data + b"\0")
    return digest.hexdigest()


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write atomically (temp file + rename) so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`, or {} when it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


SYNC_INTERVAL_S = 1.0
"""Records are synced to disk at most this long after they are written (and at close)."""


def trial_record(item: Any, outcome: str, where: dict[str, Any], backend: str) -> dict[str, Any]:
    """The fields every trial record starts with: which item, scenario, run and outcome
    (`where`: run_id, worker, analyst, model). The trial's own body is merged over it."""
    scenario = item.scenario
    return {
        "nodeid": item.nodeid,
        "recorded_at": now_iso(),
        "scenario_id": scenario.id,
        "scenario_version": scenario.version,
        "scenario_sha": item.scenario_sha,
        "suite": item.suite,
        "scenario_file": None if getattr(item, "manifest", None) else str(item.path),
        "trial": item.trial,
        "split": scenario.split.value,
        "level": scenario.level,
        "family": scenario.family,
        "group": "boundaries" if scenario.scope is not None or scenario.planted else "core",
        "answerable": scenario.answerable,
        "question": scenario.question,
        "world": scenario.dataset.world,
        "snapshot": scenario.dataset.snapshot,
        "backend": backend,
        **where,
        "outcome": outcome,
        "trace_id": None,
        "cost_usd": None,
    }


def open_append(path: Path) -> TextIO:
    """`path` opened for appending lines; a torn last line (a writer killed mid-line, the run
    now resumed) is cut off first, so the next line starts on a line of its own."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file() and (size := path.stat().st_size):
        with path.open("rb+") as raw:
            raw.seek(size - 1)
            if raw.read(1) != b"\n":
                raw.seek(0)
                raw.truncate(raw.read().rfind(b"\n") + 1)
    return path.open("a", encoding="utf-8")


class RecordWriter:
    """Appends one JSON line per finished trial to this process's part file.

    Each line is handed to the operating system before the item reports, so a killed or
    interrupted process keeps every finished trial. `fsync`, which only matters if the machine
    itself goes down, runs at most once per `SYNC_INTERVAL_S` and at close, not per trial."""

    def __init__(self, run_dir: Path, worker: str) -> None:
        self.path = run_dir / "parts" / f"records-{worker}.jsonl"
        self._file: TextIO | None = None
        self._synced_at = 0.0

    def write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            self._file = open_append(self.path)
        self._file.write(json.dumps(record, sort_keys=True, default=str) + "\n")
        self._file.flush()
        if time.monotonic() - self._synced_at >= SYNC_INTERVAL_S:
            os.fsync(self._file.fileno())
            self._synced_at = time.monotonic()

    def close(self) -> None:
        if self._file is not None:
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None


def read_json_lines(path: Path) -> list[tuple[dict[str, Any], str]]:
    """Each line of a JSONL file with its object; a torn last line (a killed writer) is
    skipped."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append((json.loads(line), line))
        except json.JSONDecodeError:
            print(f"backintel: skipped a torn line in {path}", file=sys.stderr)
    return rows


def read_records(path: Path) -> list[dict[str, Any]]:
    """Records from a JSONL file; a torn last line (a killed writer) is skipped."""
    return [record for record, _ in read_json_lines(path)]


def write_json_lines(path: Path, lines: Iterable[str]) -> None:
    """Replace `path` with these lines, atomically."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    tmp.replace(path)


def merge_parts(run_dir: Path) -> list[dict[str, Any]]:
    """Merge every part file into `records.jsonl`, sorted by item id; return the records.
    Each line is copied as its writer wrote it (sorted keys), not serialised again; a record
    superseded by a retry of its trial is left out (the retry carries it in `attempts`)."""
    rows = final_rows(
        [
            row
            for part in sorted((run_dir / "parts").glob("records-*.jsonl"))
            for row in read_json_lines(part)
        ]
    )
    rows.sort(key=lambda row: (row[0].get("nodeid", ""), row[0].get("trial", 0)))
    write_json_lines(run_dir / "records.jsonl", (line for _, line in rows))
    return [record for record, _ in rows]


def probe_warnings(records: list[dict[str, Any]]) -> list[str]:
    """One warning per world whose data probes keep tables whole: literal evidence over those
    tables alone is not caught there."""
    gaps: dict[str, set[str]] = {}
    for record in records:
        for gap in record.get("probe_gaps") or []:
            gaps.setdefault(str(record.get("world", "?")), set()).add(str(gap))
    return [
        f"the data probe of {world!r} cannot perturb every table, so evidence over these alone "
        f"is not checked against moved data: {'; '.join(sorted(found))}"
        for world, found in sorted(gaps.items())
    ]


def unguarded_warning(reason: str) -> str:
    """A trial's own warning when its evidence was not checked against moved data."""
    return f"UNGUARDED: {reason}; a literal in it would not have been caught"


def unguarded_lines(records: list[dict[str, Any]]) -> list[str]:
    """The terminal's line on trials whose evidence was not checked against moved data."""
    found = [r for r in records if r.get("probe_unguarded")]
    if not found:
        return []
    why = sorted({str(r["probe_unguarded"]) for r in found})
    return [
        f"backintel: UNGUARDED: {len(found)} trial(s) whose evidence was not checked against "
        f"moved data (the check query failed on a data probe, or no probe moved the answer): "
        f"{'; '.join(why)}"
    ]
