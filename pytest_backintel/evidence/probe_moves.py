"""Probes that move the answer itself, not only the data.

A literal copied from the source passes a probe on which the evaluator's check query gives the
same value as on the source: a text top-1 whose leader keeps its lead, a count over a table the
probe keeps whole, a sum of integers. For each scenario the two usual probes (`probe.SALTS`) are
asked first; a metric neither moves gets a probe of its own, searched over `MOVE_ATTEMPTS`
deterministic salts (`moving_salt`, the same in every worker and run): every table drops rows
(a small one or one with no key by a hash of the whole row), integer columns that are no key
grow, and rows holding the answer's own text (the winning category) are dropped with their
dependants, so another category wins. The data moves as one, so honest evidence re-run there
still gives what the check query gives. A metric nothing moves is named, and the trial is
marked unguarded (`DataProbe.still`), never passed silently.

The search runs once per process, scenario and dataset; the copies it builds are cached on
disk by salt like every other probe's.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from pytest_backintel.evidence.perturb_families import FAMILY_ATTEMPTS, family_salt
from pytest_backintel.evidence.probe import DataProbe, Probes, PythonFactory, scenario_key
from pytest_backintel.evidence.probe_search import quick_checks
from pytest_backintel.scenario import Scenario
from pytest_backintel.tolerance import compare_metric
from stores.base import DatasetFiles, Store

__all__ = ["MOVE_ATTEMPTS", "answer_texts", "moving_probes", "moving_salt", "unmoved"]

MOVE_ATTEMPTS = 8
"""Salts tried for a scenario whose answer the usual probes leave in place."""


def moving_salt(attempt: int, moving: tuple[str, ...]) -> int:
    """The salt of a probe that must move an answer: a function of the attempt and the texts it
    drops, so probes of different answers never share a cached copy."""
    return 1000 + zlib.crc32(json.dumps([attempt, list(moving)]).encode()) % 100_000_000


def answer_texts(reference: Mapping[str, Any]) -> tuple[str, ...]:
    """The texts whose rows a moving probe drops: a text value, a top-k's first item, the
    texts of a table's first row."""
    found: list[str] = []
    for value in reference.values():
        first = value[0] if isinstance(value, list) and value else value
        if isinstance(first, dict):
            first = list(first.values())
        items = first if isinstance(first, list) else [first]
        found += [v for v in items if isinstance(v, str) and v]
    return tuple(sorted(set(found)))


def _moved(scenario: Scenario, reference: Mapping[str, Any], values: Mapping[str, Any]) -> set[str]:
    """The metrics of `reference` whose value is not what the check gives on a probe."""
    return {
        spec.name
        for spec in scenario.metrics
        if spec.name in reference
        and not compare_metric(spec, reference[spec.name], values.get(spec.name)).ok
    }


def unmoved(
    scenario: Scenario, reference: Mapping[str, Any], probes: list[DataProbe]
) -> list[str] | None:
    """The metrics whose check value is the reference's on every one of `probes`; None when
    the check values are unknown on one of them (the trial is marked unguarded for that)."""
    still = {name for name, value in reference.items() if value is not None}
    for probe in probes:
        values, error = probe.check(scenario)
        if error is not None:
            return None
        still -= _moved(scenario, reference, values)
    return [spec.name for spec in scenario.metrics if spec.name in still]


def moving_probes(
    probes: Probes,
    spec: str,
    backend: Store,
    files: DatasetFiles,
    python: PythonFactory | None,
    data_hash: str | None,
    scenario: Scenario,
    reference: Callable[[], Mapping[str, Any]],
) -> list[DataProbe]:
    """The probes of `files` for `scenario`: the usual ones, and those found to move what they
    leave in place (once per scenario and dataset)."""
    base = probes.get(spec, backend, files, python, data_hash)
    if not base or not scenario.check_sql or not scenario.answerable:
        return base
    key = (spec, str(files.parquet_dir), scenario.id, scenario.version)

    def search() -> list[DataProbe]:
        try:
            ref = dict(reference())
        except Exception:  # no reference: the trial reports that itself
            return []
        still = unmoved(scenario, ref, base)
        found: list[DataProbe] = []
        texts = answer_texts(ref)
        quick = (
            quick_checks(files, scenario, texts) if still and all(p.copy for p in base) else None
        )
        extra = FAMILY_ATTEMPTS if quick is not None else 0  # world copies only
        for attempt in range(MOVE_ATTEMPTS + extra if still else 0):
            salt = (
                moving_salt(attempt, texts)
                if attempt < MOVE_ATTEMPTS
                else family_salt(attempt - MOVE_ATTEMPTS, texts)
            )
            if quick is not None and not _moved(
                scenario, {m: ref[m] for m in still or ()}, quick(salt)
            ):
                continue
            probe = probes.variant(backend, files, python, data_hash, salt, texts)
            if probe is None:
                break
            left = unmoved(scenario, {m: ref[m] for m in still or ()}, [probe])
            if left is not None and still is not None and len(left) < len(still):
                found.append(probe)
                still = left
            if not still:
                break
        if still:
            why = (
                f"the answer does not move under the probe: {', '.join(still)} keeps the "
                f"reference value on every perturbed copy of the data ({len(base)} usual, "
                f"{MOVE_ATTEMPTS + extra} searched), so a value copied from the source is not "
                "caught"
            )
            for probe in base:
                probe.still[scenario_key(scenario)] = why
        return found

    return base + probes.moves.get(key, search)
