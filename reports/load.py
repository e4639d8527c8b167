"""Read a run folder (`results/<run-id>/`): its `run.json` header and its trial records.

`records.jsonl` is preferred; when it is missing (an interrupted or still-running session)
the per-process `parts/records-*.jsonl` files are merged in memory, the same way the
controller would. A torn last line (a writer killed mid-line) is skipped with a warning; a
malformed line anywhere else is corruption and raises `RunFolderError` naming `file:line`.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pytest_backintel.records.attempts import final_rows, retried
from pytest_backintel.records.writer import no_usage_warning

__all__ = [
    "CALIBRATION_BANNER",
    "NO_USAGE_BANNER",
    "REPLAY_BANNER",
    "Run",
    "RunFolderError",
    "load_run",
    "read_jsonl",
]

CALIBRATION_BANNER = "CALIBRATION RUN — measures the harness, not a model"
REPLAY_BANNER = "REPLAY RUN — re-scores recorded answers, no model was called"
NO_USAGE_BANNER = "TOKEN USAGE UNKNOWN"


class RunFolderError(Exception):
    """A run folder is missing, unreadable or malformed; the message says where."""


def read_jsonl(path: Path, label: str | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Records of a JSONL file and warnings (naming `label`, default the path); only the last
    line may be torn."""
    name = label or str(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    records: list[dict[str, Any]] = []
    warnings: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):
                warnings.append(f"{name}:{number}: skipped a torn last line ({exc.msg})")
                continue
            raise RunFolderError(
                f"{path}:{number}: not a JSON record ({exc.msg}); only the last line of a "
                "records file may be torn"
            ) from exc
        if not isinstance(value, dict):
            raise RunFolderError(f"{path}:{number}: expected a JSON object, got {value!r:.60}")
        records.append(value)
    return records, warnings


@dataclass(frozen=True)
class Run:
    """One run folder: header, records (sorted by node id and trial) and load warnings."""

    path: Path
    header: dict[str, Any]
    records: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return str(self.header.get("run_id") or self.path.name)

    @property
    def is_calibration(self) -> bool:
        analyst = self.header.get("analyst") or {}
        if isinstance(analyst, dict) and analyst.get("calibration") is True:
            return True
        return any((r.get("analyst") or {}).get("kind") == "calibration" for r in self.records)

    @property
    def is_replay(self) -> bool:
        analyst = self.header.get("analyst") or {}
        if isinstance(analyst, dict) and "replay" in (
            str(analyst.get("spec", "")),
            str(analyst.get("kind", "")),
        ):
            return True
        return any((r.get("analyst") or {}).get("kind") == "replay" for r in self.records)

    @property
    def usage_unreported(self) -> int:
        """Trials whose provider reported no token usage (from the records, else run.json)."""
        if self.records:
            usages = [r.get("usage") or {} for r in self.records]
            return sum(1 for u in usages if u.get("tokens_reported") is False)
        return int(self.header.get("usage_unreported_trials") or 0)

    @property
    def banners(self) -> list[str]:
        """Labels every page and sheet of this run's reports must carry."""
        out = []
        if self.is_calibration:
            out.append(CALIBRATION_BANNER)
        if self.is_replay:
            out.append(REPLAY_BANNER)
        if warning := no_usage_warning(self.usage_unreported):
            out.append(f"{NO_USAGE_BANNER} — {warning}")
        if n := sum(1 for r in self.records if r.get("probe_unguarded")):
            out.append(
                f"UNGUARDED: {n} trial(s) whose evidence was not checked against moved data "
                "(the check query failed on a data probe; see each trial's warnings)"
            )
        return out

    @property
    def retried(self) -> int:
        """Trials whose outcome comes from `--retry-blocked` (the earlier attempt kept)."""
        return retried(self.records)

    @property
    def analyst_name(self) -> str:
        names = sorted({str((r.get("analyst") or {}).get("name")) for r in self.records})
        if names:
            return ", ".join(names)
        analyst = self.header.get("analyst") or {}
        return str(analyst.get("spec", "unknown")) if isinstance(analyst, dict) else "unknown"

    @property
    def model(self) -> str | None:
        model = self.header.get("model")
        if model:
            return str(model)
        models = sorted({str(r["model"]) for r in self.records if r.get("model")})
        return ", ".join(models) if models else None

    @cached_property
    def planned_nodeids(self) -> list[str]:
        """Items the run planned before any ran: `run.json` `planned_items`, else the
        frozen run's `freeze.lock.json` `plan_items`; empty when neither was written."""
        planned = self.header.get("planned_items")
        if not isinstance(planned, list):
            planned = _read_lock(self.path).get("plan_items")
        return sorted({str(p) for p in planned}) if isinstance(planned, list) else []

    @cached_property
    def missing_trials(self) -> list[str]:
        """Planned trials without a record, named: a planned item no record carries, and every
        trial number below a case's highest recorded one that has no record."""
        recorded = {str(r.get("nodeid")) for r in self.records if r.get("nodeid")}
        missing = [f"{n} (planned, no record)" for n in self.planned_nodeids if n not in recorded]
        trials: dict[str, set[int]] = {}
        for r in self.records:
            trials.setdefault(str(r["scenario_id"]), set()).add(int(r.get("trial", 0)))
        for case, seen in sorted(trials.items()):
            gaps = sorted(set(range(1, max(seen) + 1)) - seen)
            missing += [f"{case} trial {t} (trial {max(seen)} was recorded)" for t in gaps]
        return missing

    @cached_property
    def scenario_hash(self) -> str:
        """sha256 over `id@scenario_sha` of every recorded case, as the harness computes it."""
        cases = sorted({f"{r['scenario_id']}@{r.get('scenario_sha', '')}" for r in self.records})
        return hashlib.sha256("\n".join(cases).encode()).hexdigest()

    @cached_property
    def data_hashes(self) -> dict[str, str]:
        """world -> data hash over the records (falls back to run.json's `data_hashes`)."""
        found = {(str(r["world"]), str(r["data_hash"])) for r in self.records if r.get("data_hash")}
        if found:
            return dict(sorted(found))
        header = self.header.get("data_hashes") or {}
        return {str(k): str(v) for k, v in sorted(header.items())}


def _read_object(file: Path, strict: bool = True) -> dict[str, Any]:
    """A JSON object from `file` ({} when absent); unreadable JSON is a `RunFolderError`, and so
    is another JSON value when `strict`."""
    if not file.exists():
        return {}
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunFolderError(f"{file}: not readable JSON ({exc})") from exc
    if not isinstance(data, dict):
        if strict:
            raise RunFolderError(f"{file}: expected a JSON object")
        return {}
    return data


def _read_header(path: Path) -> dict[str, Any]:
    return _read_object(path / "run.json")


def _read_lock(folder: Path) -> dict[str, Any]:
    return _read_object(folder / "freeze.lock.json", strict=False)


def load_run(path: Path | str) -> Run:
    """Load a run folder; raise `RunFolderError` if it holds neither run.json nor records."""
    folder = Path(path)
    if not folder.is_dir():
        raise RunFolderError(f"{folder}: no such run folder (expected results/<run-id>/)")
    header = _read_header(folder)
    records_file = folder / "records.jsonl"
    parts = sorted((folder / "parts").glob("records-*.jsonl"))
    records: list[dict[str, Any]] = []
    warnings: list[str] = []
    if records_file.exists():
        records, warnings = read_jsonl(records_file, records_file.name)
    elif parts:
        for part in parts:
            found, warned = read_jsonl(part, f"parts/{part.name}")
            records += found
            warnings += warned
        records = [r for r, _ in final_rows([(r, None) for r in records])]  # retries supersede
        warnings.append(f"no records.jsonl; merged {len(parts)} part file(s) from parts/")
    elif not header:
        raise RunFolderError(
            f"{folder}: neither run.json nor records.jsonl nor parts/records-*.jsonl found"
        )
    for index, record in enumerate(records):
        missing = [k for k in ("scenario_id", "outcome") if k not in record]
        if missing:
            raise RunFolderError(f"{folder}: record {index + 1} lacks {', '.join(missing)}")
    records.sort(key=lambda r: (str(r.get("nodeid", r["scenario_id"])), int(r.get("trial", 0))))
    for warning in warnings:
        print(f"backintel: {folder}: {warning}", file=sys.stderr)
    return Run(folder, header, records, warnings)
