"""Re-run one piece of Python evidence in a fresh sandbox and read the metric values it prints.

The code must print one JSON object mapping metric names to values, on the last line of stdout
(or as the whole of stdout). Anything else — a limit hit, a non-zero exit, truncated output, no
JSON object, NaN/Infinity — is a `PythonEvidenceError` that the harness scores as unsupported
evidence. A failing sandbox raises `SandboxError` (infra_error: not the analyst's fault).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pytest_backintel.sandbox.base import ExecResult, SandboxProvider
from pytest_backintel.sandbox.limits import Limits

__all__ = [
    "PythonEvidenceError",
    "PythonEvidenceValues",
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


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a metric may take")


def _as_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def parse_metric_json(stdout: str) -> dict[str, Any] | None:
    """The JSON object on the last non-empty line of `stdout`, else the whole of it, else None."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        return None
    last = _as_object(lines[-1])
    return last if last is not None else _as_object(stdout)


def run_python_evidence(
    provider: SandboxProvider,
    store_mount: Path | None,
    code: str,
    *,
    limits: Limits | None = None,
    workdir: Path | None = None,
) -> PythonEvidenceValues | PythonEvidenceError:
    """Run `code` in a new sandbox over `store_mount` (closed afterwards) and parse its output."""
    with provider.open(store_mount, workdir) as sandbox:
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
    values = parse_metric_json(result.stdout)
    if values is None:
        return PythonEvidenceError(
            "no_json",
            "stdout does not end with (or consist of) one JSON object of metric values",
            result,
        )
    return PythonEvidenceValues(values, result)
