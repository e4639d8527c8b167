"""The references lock file: a user suite's reference values, committed beside its scenarios.

`backintel references build` writes `backintel.lock.json` into every folder that holds
scenarios bound to a source of your own. Each entry keeps the values, the data hash they were
computed on and the reference spec (SQL, inline values or `module:function`) that produced
them, and (since format 2) the fingerprint method behind that hash
(`stores.common.fingerprint_methods`). A run reads an entry only after the analyst has answered, and
refuses one computed on other data or from another spec, naming the scenario and both hashes.
An entry whose hash is by an older fingerprint method is verified with that method where the
harness still has it, else refused as a change of the harness, not of the data, naming
`backintel references build --check-upgrade`. Format 1 locks (no method named) are read too.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_backintel.collect.prediction_refs import labels_file
from pytest_backintel.scenario import MetricKind, Scenario
from stores.common.fingerprint_methods import LEGACY, current_method

__all__ = [
    "LOCK_NAME",
    "UNNAMED",
    "UPGRADE",
    "FingerprintChangedError",
    "LockError",
    "Problem",
    "StaleLockError",
    "check_columns",
    "check_values",
    "data_files",
    "lock_path",
    "missing_files",
    "no_file",
    "read_lock",
    "reference_for",
    "render_lock",
    "spec_of",
]

LOCK_NAME = "backintel.lock.json"
FORMAT = 2
"""2: every entry names its fingerprint method (`fingerprint`); 1: none did."""
READABLE = (1, 2)
UNNAMED = "unnamed (lock format 1)"
"""The `fingerprint` a format 1 entry is read with: any method its kind had then."""
UPGRADE = "backintel references build --check-upgrade"
REBUILD = (
    "run `backintel references build` on this data (with the run's --dataset, if any) and "
    "commit the lock file"
)


class LockError(Exception):
    """A lock file is missing, unreadable, or has no entry for a scenario."""


class StaleLockError(LockError):
    """An entry was computed on other data or from another reference spec."""


class FingerprintChangedError(StaleLockError):
    """An entry's data hash is by a fingerprint method this harness can no longer compute:
    the harness changed, which says nothing about the data."""


def lock_path(scenario: Scenario) -> Path:
    """`backintel.lock.json` in the folder of the scenario's file."""
    base = scenario.dataset.base_dir
    if base is None:
        raise LockError(f"scenario {scenario.id!r} was not loaded from a file: it has no lock file")
    return base / LOCK_NAME


def spec_of(scenario: Scenario) -> dict[str, Any]:
    """What an entry was computed from: the reference spec and the check query; for a
    prediction, also the prediction spec and the labels file's SHA-256."""
    ref = scenario.reference
    spec: dict[str, Any] = {
        "reference": ref.model_dump(mode="json", exclude_none=True) if ref else None,
        "check_sql": scenario.check_sql,
    }
    if scenario.prediction is not None and scenario.prediction.labels is not None:
        path = labels_file(scenario)
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        spec["prediction"] = scenario.prediction.model_dump(mode="json", exclude_none=True)
        spec["labels_sha256"] = digest
    return spec


def read_lock(path: Path) -> dict[str, dict[str, Any]]:
    """Scenario id -> entry; `LockError` naming the file when it is absent or malformed."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LockError(f"no lock file {path}: {REBUILD}") from None
    except (OSError, ValueError) as exc:
        raise LockError(f"{path}: not a readable lock file ({exc}): {REBUILD}") from exc
    entries = doc.get("scenarios") if isinstance(doc, dict) else None
    if not isinstance(entries, dict) or doc.get("format") not in READABLE:
        raise LockError(f"{path}: not a backintel lock file (format {FORMAT}): {REBUILD}")
    if doc["format"] == 1:  # no method named: any its kind had then (`LEGACY`)
        for entry in entries.values():
            if isinstance(entry, dict):
                entry.setdefault("fingerprint", UNNAMED)
                for other in (entry.get("also") or {}).values():
                    other.setdefault("fingerprint", UNNAMED)
    return entries


Rehash = Callable[[str], "str | None"]
"""The run's data hash by another fingerprint method, None where the harness lacks it."""


def _memo(rehash: Rehash) -> Rehash:
    done: dict[str, str | None] = {}

    def once(method: str) -> str | None:
        if method not in done:
            done[method] = rehash(method)
        return done[method]

    return once


def _verdict(
    kind: str, entry: dict[str, Any], data_hash: str, method: str | None, rehash: Rehash | None
) -> tuple[bool, list[str]]:
    """Whether `entry` was computed on this data, and the methods it may have used that the
    harness cannot compute (so a mismatch may be the harness's, not the data's)."""
    named = entry.get("fingerprint")
    if method is None or named in (None, method):
        return entry.get("data_hash") == data_hash, []
    if entry.get("data_hash") == data_hash and named == UNNAMED:
        return True, []
    tried = LEGACY.get(kind, (current_method(kind),)) if named == UNNAMED else (named,)
    lacking = []
    for old in (m for m in tried if m != method):
        digest = rehash(old) if rehash is not None else None
        if digest is None:
            lacking.append(old)
        elif digest == entry.get("data_hash"):
            return True, []
    return False, lacking


def reference_for(
    scenario: Scenario,
    data_hash: str,
    *,
    method: str | None = None,
    rehash: Rehash | None = None,
) -> dict[str, Any]:
    """The scenario's reference values, checked against the data and the spec. `method` names
    the fingerprint behind `data_hash`; an entry by another method is checked by `rehash`."""
    path = lock_path(scenario)
    entry = read_lock(path).get(scenario.id)
    if entry is None:
        raise LockError(f"{path} has no reference for scenario {scenario.id!r}: {REBUILD}")
    also: dict[str, Any] = entry.get("also") or {}
    kind = scenario.dataset.source_kind or ""
    if rehash is not None:
        rehash = _memo(rehash)
    lacking: list[str] = []
    chosen: dict[str, Any] | None = None
    for candidate in (entry, *also.values()):
        ok, missing = _verdict(kind, candidate, data_hash, method, rehash)
        lacking += missing
        if ok:
            chosen = candidate
            break
    if chosen is None and lacking:
        raise FingerprintChangedError(
            f"scenario {scenario.id!r}: the data hash of its reference in {path} is by a "
            f"fingerprint method this harness no longer has ({', '.join(dict.fromkeys(lacking))};"
            f" it fingerprints with {method}): the harness changed how it "
            "fingerprints data; that says nothing about your data. Run "
            f"`{UPGRADE}` (with the run's --dataset, if any): it rebuilds the lock and shows "
            "per scenario `unchanged` or `changed old -> new`"
        )
    if chosen is None:
        more = "".join(f" or {e.get('data_hash')} ({label})" for label, e in sorted(also.items()))
        raise StaleLockError(
            f"scenario {scenario.id!r}: its reference in {path} was computed on data "
            f"{entry.get('data_hash')}{more}, but this run's data is {data_hash}"
            f"{missing_files(scenario, entry.get('files'))}: {REBUILD}"
        )
    other = chosen if chosen is not entry else None
    if entry.get("spec") != spec_of(scenario):
        raise StaleLockError(
            f"scenario {scenario.id!r}: its reference or check query changed since {path} "
            f"was built: {REBUILD}"
        )
    values = (other or entry).get("values")
    if not isinstance(values, dict):
        raise LockError(f"{path}: the entry for {scenario.id!r} has no values: {REBUILD}")
    return values


def data_files(scenario: Scenario) -> dict[str, Any]:
    """For a CSV or Parquet folder, the lock entry's `files`: its table files, so a file gone
    since is named as such (its data hash alone would only say "other data")."""
    kind = scenario.dataset.source_kind
    if kind not in ("csv", "parquet"):
        return {}
    return {"files": sorted(p.name for p in scenario.dataset.source_path().glob(f"*.{kind}"))}


def missing_files(scenario: Scenario, files: Any = None) -> str:
    """A sentence naming the table files of `files` (default: the folder's files named in no
    lock: none) that are gone from the scenario's folder; "" when none is."""
    if scenario.dataset.source_kind not in ("csv", "parquet") or not isinstance(files, list):
        return ""
    folder = scenario.dataset.source_path()
    if not (gone := [str(f) for f in files if not (folder / str(f)).is_file()]):
        return ""
    return (
        f"; the file(s) {', '.join(gone)} it was computed with are missing from {folder}: "
        "restore them (a lock rebuilt without them would fail on every query that reads them)"
    )


def no_file(scenario: Scenario, error: str) -> str:
    """For a CSV or Parquet folder with no file for the table a query failed on: which."""
    kind, table = scenario.dataset.source_kind, re.search(r"Table with name (\w+)", error)
    if kind not in ("csv", "parquet") or table is None:
        return ""
    return missing_files(scenario, [f"{table.group(1)}.{kind}"])


def render_lock(entries: dict[str, dict[str, Any]]) -> str:
    """The lock file's text: stable key order, so a rebuild on the same data is a no-op."""
    doc = {"format": FORMAT, "scenarios": dict(sorted(entries.items()))}
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


Problem = tuple[tuple[str | int, ...], str]
"""Where in the scenario file (a YAML location, for its line) and what is wrong."""
_ALLOWED = {
    "count": "a count is a whole number (an integer)",
    "currency": "a currency amount is a number",
    "ratio": "a ratio is a number",
    "duration": "a duration is a number (in the declared unit)",
    "text": "a text value is a string",
}
_SHOWN_ROWS = 5


def _scalar_problem(kind: str, value: Any) -> str | None:
    """Why `value` cannot be a `kind` value (None: it can)."""
    if value is None:
        return "is NULL (a reference is never NULL: NULL is not zero)"
    if kind == "text":
        return None if isinstance(value, str) else f"{value!r} is not a string"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{value!r} is not a number"
    if not math.isfinite(value):
        return f"{value!r} is not a finite number"
    if kind == "count" and isinstance(value, float):
        what = (
            "not a whole number" if not value.is_integer() else "a decimal number, not an integer"
        )
        return f"{value!r} is {what} (declare `kind: currency`, `ratio` or `duration` for it)"
    return None


def check_values(scenario: Scenario, values: dict[str, Any]) -> list[Problem]:
    """Every locked value that does not fit its metric's declared kind, located at the
    metric's `kind` in the scenario file. A prediction's values are its hidden cohort: rows of
    entity, label and baseline."""
    out: list[Problem] = []
    if scenario.prediction is not None:
        rows = values.get("cohort")
        fields = {"entity", "label", "baseline"}
        if not isinstance(rows, list) or not rows:
            return [(("prediction", "labels"), "the reference has no scoring cohort")]
        if not all(isinstance(r, dict) and set(r) == fields for r in rows):
            return [(("prediction", "labels"), f"every cohort row has exactly {sorted(fields)}")]
        return []
    for index, metric in enumerate(scenario.metrics):
        loc: tuple[str | int, ...] = ("metrics", index, "kind")
        if metric.name not in values:
            out.append((loc, f"metric {metric.name!r}: the reference gives no value for it"))
            continue
        value = values[metric.name]
        if metric.kind is not MetricKind.TABLE:
            if (why := _scalar_problem(metric.kind.value, value)) is not None:
                out.append(
                    (loc, f"metric {metric.name!r} is declared `{metric.kind.value}` but its "
                          f"reference value {why}; {_ALLOWED[metric.kind.value]}")
                )  # fmt: skip
            continue
        out += [
            (loc, f"metric {metric.name!r} (table): {p}") for p in _table_problems(metric, value)
        ]
    return out


def _table_problems(metric: Any, rows: Any) -> list[str]:
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        return [f"the reference value {rows!r:.80} is not a list of rows (a table is rows)"]
    declared = [c.name for c in metric.columns]
    found: list[str] = []
    for number, row in enumerate(rows, start=1):
        if missing := [c for c in declared if c not in row]:
            found.append(
                f"row {number} has no column {', '.join(missing)} (it has {', '.join(row)}); "
                f"the declared columns are {', '.join(declared)}"
            )
            continue
        for column in metric.columns:
            cell = row[column.name]
            if cell is None and column.name not in metric.key:
                continue  # a NULL cell is compared as NULL
            if (why := _scalar_problem(column.kind, cell)) is not None:
                found.append(
                    f"row {number}, column {column.name} (`{column.kind}`): {why}; "
                    f"{_ALLOWED[column.kind]}"
                )
    if metric.key and not found:
        keys = [tuple(row[k] for k in metric.key) for row in rows]
        if dupes := sorted({str(k) for k in keys if keys.count(k) > 1}):
            found.append(f"key {', '.join(metric.key)} repeats: {', '.join(dupes[:_SHOWN_ROWS])}")
    if len(found) > _SHOWN_ROWS:
        found = [*found[:_SHOWN_ROWS], f"and {len(found) - _SHOWN_ROWS} more problem(s)"]
    return found


def check_columns(scenario: Scenario, columns: list[str]) -> str | None:
    """Why a reference query returning `columns` cannot give the scenario's metrics (None:
    it can): one column per metric, named as the metric, or a table metric's columns."""
    tables = [m for m in scenario.metrics if m.kind is MetricKind.TABLE]
    wanted = [c.name for c in tables[0].columns] if tables else [m.name for m in scenario.metrics]
    missing = [name for name in wanted if name not in columns]
    if not missing:
        return None
    what = "the table's columns" if tables else "one column per metric, named as the metric"
    return (
        f"returns columns {', '.join(columns) or '(none)'} but needs {what}: no column "
        f"{', '.join(missing)} (name it with `AS {missing[0]}`)"
    )
