"""References as JSON numbers, and the build-time cross-check against each case's check SQL."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

from scenarios.acceptance.model import RefValue

__all__ = ["CHECK_TOLERANCE", "AcceptanceBuildError", "cross_check", "json_value"]

CHECK_TOLERANCE = 1e-9
"""Largest difference allowed between a reference and its check SQL for currency, ratio and
duration metrics: SQLite computes in binary floating point, the reference exactly."""


class AcceptanceBuildError(Exception):
    """The acceptance suite cannot be built as declared; the message names the case."""


def json_value(kind: str, value: RefValue) -> int | float | str:
    """A reference value in its JSON form: counts int, money and fractions as numbers."""
    if kind == "text":
        if not isinstance(value, str):
            raise TypeError(f"a text reference must be a string, got {value!r}")
        return value
    if isinstance(value, str | bool):
        raise TypeError(f"a {kind} reference must be a number, got {value!r}")
    if kind == "count":
        if not isinstance(value, int):
            raise TypeError(f"a count reference must be an int, got {value!r}")
        return value
    if isinstance(value, Decimal | Fraction) and value == int(value):
        return int(value)
    return float(value)


def _agrees(kind: str, expected: RefValue, got: object) -> bool:
    if got is None:
        return False
    if kind == "text":
        return isinstance(got, str) and got.strip().casefold() == str(expected).strip().casefold()
    if kind == "count":
        return isinstance(got, int) and not isinstance(got, bool) and got == expected
    if not isinstance(got, int | float) or isinstance(got, bool) or isinstance(expected, str):
        return False
    return abs(Fraction(got) - Fraction(expected)) <= Fraction(CHECK_TOLERANCE)


def cross_check(
    case_id: str,
    db: Path,
    check_sql: str,
    metrics: Sequence[Mapping[str, Any]],
    reference: Mapping[str, RefValue],
) -> None:
    """Run `check_sql` on the built store; raise naming the case and metric on any mismatch."""
    names = [str(m["name"]) for m in metrics]
    if sorted(reference) != sorted(names):
        raise AcceptanceBuildError(
            f"case {case_id}: reference metrics {sorted(reference)} differ from the requested "
            f"metrics {sorted(names)}"
        )
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        cursor = conn.execute(check_sql)
        columns = [d[0] for d in cursor.description]
        rows = cursor.fetchall()
    except sqlite3.Error as exc:
        raise AcceptanceBuildError(f"case {case_id}: check_sql failed: {exc}") from exc
    finally:
        conn.close()
    if sorted(columns) != sorted(names) or len(rows) != 1:
        raise AcceptanceBuildError(
            f"case {case_id}: check_sql must return one row with one column per metric "
            f"{sorted(names)}; got columns {columns} and {len(rows)} row(s)"
        )
    got = dict(zip(columns, rows[0], strict=True))
    for spec in metrics:
        name, kind = str(spec["name"]), str(spec["kind"])
        if not _agrees(kind, reference[name], got[name]):
            raise AcceptanceBuildError(
                f"case {case_id}: metric {name}: reference {json_value(kind, reference[name])!r} "
                f"disagrees with check_sql {got[name]!r} ({kind}, allowed difference "
                f"{CHECK_TOLERANCE:g} for non-count numbers)"
            )
