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

The search runs once per process, scenario and dataset, and its result is kept on disk
(`probe_move_cache`): a later process builds only the winners and checks that each still moves
what it moved, searching again on any disagreement. The copies are cached on disk by salt like
every other probe's.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_backintel.evidence.perturb_families import FAMILY_ATTEMPTS, family_salt
from pytest_backintel.evidence.probe import DataProbe, Probes, PythonFactory, scenario_key
from pytest_backintel.evidence.probe_move_cache import MoveCache, MoveEntry, move_key
from pytest_backintel.evidence.probe_search import quick_checks, quick_possible
from pytest_backintel.scenario import Scenario
from pytest_backintel.tolerance import compare_metric
from stores.base import DatasetFiles, Store

__all__ = [
    "MOVE_ATTEMPTS",
    "SEARCHES",
    "answer_texts",
    "moving_probes",
    "moving_salt",
    "search_moves",
    "unmoved",
]

MOVE_ATTEMPTS = 8
"""Salts tried for a scenario whose answer the usual probes leave in place."""

SEARCHES: list[str] = []
"""The scenario of every full search this process ran (a cached result replayed is none)."""


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


def _searched(base: list[DataProbe], files: DatasetFiles, scenario: Scenario) -> int:
    """How many salts the search tries: the family probes only on a world's copies."""
    quick = all(p.copy for p in base) and quick_possible(files, scenario)
    return MOVE_ATTEMPTS + (FAMILY_ATTEMPTS if quick else 0)


def _candidates(searched: int, texts: tuple[str, ...]) -> list[int]:
    """The salts the search tries, in order."""
    return [
        moving_salt(a, texts) if a < MOVE_ATTEMPTS else family_salt(a - MOVE_ATTEMPTS, texts)
        for a in range(searched)
    ]


@dataclass
class _Search:
    """One scenario's search on one dataset: what it needs, and what it found."""

    probes: Probes
    spec: str
    backend: Store
    files: DatasetFiles
    python: PythonFactory | None
    data_hash: str | None
    scenario: Scenario
    reference: dict[str, Any]
    base: list[DataProbe]

    def variant(self, salt: int, texts: tuple[str, ...]) -> DataProbe | None:
        args = (self.spec, self.backend, self.files, self.python, self.data_hash, salt, texts)
        return self.probes.variant(*args)

    def left(self, still: list[str], probe: DataProbe) -> list[str] | None:
        return unmoved(self.scenario, {m: self.reference[m] for m in still}, [probe])

    def run(self, still: list[str], searched: int) -> tuple[list[DataProbe], MoveEntry]:
        """The full search over `searched` salts from `still` (a counted search)."""
        SEARCHES.append(self.scenario.id)
        texts = answer_texts(self.reference)
        quick = quick_checks(self.files, self.scenario, texts) if searched > MOVE_ATTEMPTS else None
        found: list[DataProbe] = []
        moves: list[tuple[int, tuple[str, ...]]] = []
        for salt in _candidates(searched, texts):
            if quick is not None and not _moved(
                self.scenario, {m: self.reference[m] for m in still}, quick(salt)
            ):
                continue
            probe = self.variant(salt, texts)
            if probe is None:
                break
            left = self.left(still, probe)
            if left is not None and len(left) < len(still):
                found.append(probe)
                moves.append((salt, tuple(m for m in still if m not in left)))
                still = left
            if not still:
                break
        return found, MoveEntry(tuple(moves), tuple(still))

    def replay(self, still: list[str], searched: int, entry: MoveEntry) -> list[DataProbe] | None:
        """The winners of `entry`, each checked to move what it moved (in the search's order,
        among the salts it tries); None when one does not."""
        texts = answer_texts(self.reference)
        order = {salt: i for i, salt in enumerate(_candidates(searched, texts))}
        salts = [salt for salt, _ in entry.moves]
        if any(s not in order for s in salts) or salts != sorted(salts, key=order.__getitem__):
            return None
        found: list[DataProbe] = []
        for salt, moved in entry.moves:
            probe = self.variant(salt, texts)
            left = None if probe is None else self.left(still, probe)
            if left is None or not moved or [m for m in still if m not in left] != list(moved):
                return None
            assert probe is not None
            found.append(probe)
            still = left
        return found if tuple(still) == entry.unmoved else None


def search_moves(
    probes: Probes,
    spec: str,
    backend: Store,
    files: DatasetFiles,
    data_hash: str,
    scenario: Scenario,
    reference: Mapping[str, Any],
) -> tuple[str, MoveEntry] | None:
    """The full search's result and its key, cache or not (`backintel references benchmark`
    writes the shipped ones as a seed); None when the usual probes move the whole answer."""
    base = probes.get(spec, backend, files, None, data_hash)
    ref = dict(reference)
    search = _Search(probes, spec, backend, files, None, data_hash, scenario, ref, base)
    still = unmoved(scenario, search.reference, base) if base and scenario.check_sql else None
    if not still:
        return None
    texts = answer_texts(search.reference)
    key = move_key(spec, data_hash, scenario, texts, search.reference, MOVE_ATTEMPTS)
    return key, search.run(still, _searched(base, files, scenario))[1]


def moving_probes(
    probes: Probes,
    spec: str,
    backend: Store,
    files: DatasetFiles,
    python: PythonFactory | None,
    data_hash: str | None,
    scenario: Scenario,
    reference: Callable[[], Mapping[str, Any]],
    seed: Path | None = None,
) -> list[DataProbe]:
    """The probes of `files` for `scenario`: the usual ones, and those found to move what they
    leave in place (once per scenario and dataset; the search's result is cached on disk under
    `probes.cache_dir()`, with `seed` behind it, and checked on use)."""
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
        if not still:
            return []
        run = _Search(probes, spec, backend, files, python, data_hash, scenario, ref, base)
        searched = _searched(base, files, scenario)
        cache = MoveCache(probes.cache_dir() / "moving-probes", seed)
        name = (
            move_key(spec, data_hash, scenario, answer_texts(ref), ref, MOVE_ATTEMPTS)
            if data_hash
            else None
        )
        entry = cache.read(name) if name else None
        found = run.replay(still, searched, entry) if entry is not None else None
        if found is None or entry is None:
            found, entry = run.run(still, searched)
            if name:
                cache.write(name, entry)
        if entry.unmoved:
            why = (
                f"the answer does not move under the probe: {', '.join(entry.unmoved)} keeps the "
                f"reference value on every perturbed copy of the data ({len(base)} usual, "
                f"{searched} searched), so a value copied from the source is not caught"
            )
            for probe in base:
                probe.still[scenario_key(scenario)] = why
        return found

    return base + probes.moves.get(key, search)
