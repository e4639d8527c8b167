"""Re-run one piece of Python evidence in a fresh sandbox and read the metric values it prints.

The code must print one JSON object mapping metric names to values, on the last line of stdout
(or as the whole of stdout). Anything else — a limit hit, a non-zero exit, truncated output, no
JSON object, NaN/Infinity — is a `PythonEvidenceError` that the harness scores as unsupported
evidence. A failing sandbox raises `SandboxError` (infra_error: not the analyst's fault).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pytest_backintel.sandbox.base import ExecResult, SandboxProvider
from pytest_backintel.sandbox.limits import Limits
from pytest_backintel.sandbox.zygote import forked_run

__all__ = [
    "PythonEvidenceError",
    "PythonEvidenceValues",
    "metric_json",
    "parse_metric_json",
    "run_python_evidence",
]

ErrorKind = Literal["limit", "exit", "truncated", "no_json"]


@dataclass(frozen=True)
class PythonEvidenceValues:
    """The evidence ran and printed these metric values."""

    values: dict[str, Any]
    result: ExecResult


@dataclass(frozen=True)
class PythonEvidenceError:
    """The evidence could not be reproduced; `reason` says why, for the report."""

    kind: ErrorKind
    reason: str
    result: ExecResult


MAX_DEPTH = 8
"""Metric values nest at most this deep (an object of tables of rows is 3)."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a metric may take")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large to be a number a metric may take")
    return value


def _depth(text: str) -> int:
    """The deepest nesting of `[`/`{` in `text`, outside JSON strings (no recursion)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _as_object(text: str) -> tuple[dict[str, Any] | None, str]:
    if (depth := _depth(text)) > MAX_DEPTH:
        return None, f"the JSON nests {depth} levels deep; metric values nest at most {MAX_DEPTH}"
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite)
    except (ValueError, RecursionError) as exc:
        return None, f"not valid JSON of metric values ({str(exc)[:200]})"
    if not isinstance(value, dict):
        return None, f"the JSON is a {type(value).__name__}, not an object of metric values"
    return value, ""


def metric_json(stdout: str) -> tuple[dict[str, Any] | None, str]:
    """The JSON object on the last non-empty line of `stdout`, else the whole of it; or None
    and the reason (not JSON, too deep, NaN or a number too large, not an object)."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        return None, "the program printed nothing"
    last, why = _as_object(lines[-1])
    if last is not None or len(lines) == 1:
        return last, why
    whole, _ = _as_object(stdout)
    return (whole, "") if whole is not None else (None, why)


def parse_metric_json(stdout: str) -> dict[str, Any] | None:
    """The JSON object of metric values in `stdout` (see `metric_json`), else None."""
    return metric_json(stdout)[0]


def run_python_evidence(
    provider: SandboxProvider,
    store_mount: Path | None,
    code: str,
    *,
    limits: Limits | None = None,
    workdir: Path | None = None,
    channel: Path | None = None,
) -> PythonEvidenceValues | PythonEvidenceError:
    """Run `code` in a new sandbox (or a zygote's fresh child, as isolated) over `store_mount`
    and the query channel in the `channel` folder, when given, and parse its output."""
    result = None
    if workdir is None:  # a zygote's child, when the provider has one (`zygote.py`)
        result = forked_run(provider, store_mount, code, limits or provider.limits, channel)
        if result is not None and result.returncode < 0 and result.limit_hit is None:
            # a signal no limit explains: a forked child is not a fresh process (it inherits
            # the preloaded libraries' state), so the fresh sandbox's end is the record
            result = None
    if result is None:
        if channel is not None:
            opened = provider.open(store_mount, workdir, channel)
        else:  # a provider of before the channel takes no `channel`
            opened = provider.open(store_mount, workdir)
        with opened as sandbox:
            result = sandbox.exec(code, limits=limits)
    if result.limit_hit is not None:
        return PythonEvidenceError("limit", f"stopped by the {result.limit_hit} limit", result)
    if result.returncode != 0:
        tail = result.stderr.strip().splitlines()[-1:] or ["no stderr"]
        return PythonEvidenceError(
            "exit", f"exited with code {result.returncode}: {tail[0]}", result
        )
    if result.stdout_truncated:
        return PythonEvidenceError(
            "truncated", "stdout was truncated, so its JSON cannot be read", result
        )
    values, why = metric_json(result.stdout)
    if values is None:
        return PythonEvidenceError(
            "no_json",
            f"stdout does not end with (or consist of) one JSON object of metric values: {why}",
            result,
        )
    return PythonEvidenceValues(values, result)
