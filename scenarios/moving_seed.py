"""The shipped scenarios' moving-probe search results, committed beside their references.

`backintel references benchmark` writes `<world>[-<snapshot>].moves.json` next to each
references file: per scenario the probe search's result on the world's pinned data
(`pytest_backintel.evidence.probe_moves.search_moves`), which a run reads as a read-only seed of
its cache (`ReferencedWorld.moving_probe_seed`) and checks on use, so a fresh clone skips the
search. `--check` says when the file no longer names every scenario's current search (a
changed scenario, reference, data or perturbation), which only costs time, never correctness.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pytest_backintel.collect.backends import StoreBackends, backend_for, store_spec
from pytest_backintel.evidence.probe import Probes
from pytest_backintel.evidence.probe_move_cache import MoveEntry, move_key, read_seed, render_seed
from pytest_backintel.evidence.probe_moves import MOVE_ATTEMPTS, answer_texts, search_moves
from pytest_backintel.scenario import Scenario
from stores.base import DatasetFiles
from stores.engine.folders import remove_folder

__all__ = [
    "DEFAULT_STORE",
    "Case",
    "build_seed",
    "moves_path",
    "seed_problem",
    "seeded_scenarios",
    "world_cases",
]

DEFAULT_STORE = "sqlite"
"""The store a run takes unless the scenario or `--store` names another (the README's)."""


def moves_path(references: Path) -> Path:
    """The seed file beside a references file: `olist.json` -> `olist.moves.json`."""
    return references.with_suffix(".moves.json")


def seeded_scenarios(scenarios: Iterable[Scenario]) -> list[Scenario]:
    """The scenarios a run searches probes for: answerable, with a check query, no prediction."""
    return [s for s in scenarios if s.answerable and s.check_sql and s.prediction is None]


Case = tuple[Scenario, DatasetFiles, str, Mapping[str, Any]]
"""A searched scenario, its dataset's files and data hash, and its reference values."""


def world_cases(
    scenarios: Iterable[Scenario], files: DatasetFiles, doc: Mapping[str, Any]
) -> list[Case]:
    """The searched scenarios of one references document (`doc`) on its world's `files`."""
    return [
        (s, files, doc["data_hash"], dict(doc["references"][s.id]["values"] or {}))
        for s in seeded_scenarios(scenarios)
    ]


def _key(case: Case) -> str:
    scenario, _, data_hash, ref = case
    spec = store_spec(scenario, DEFAULT_STORE)
    return move_key(spec, data_hash, scenario, answer_texts(ref), ref, MOVE_ATTEMPTS)


def build_seed(cases: list[Case], data_root: Path) -> str:
    """The seed file's text: every case's full search."""
    backends = StoreBackends(lambda: data_root)
    probes = Probes(lambda: data_root / "perturbed")
    entries: dict[str, tuple[str, MoveEntry]] = {}
    try:
        for case in cases:
            scenario, files, data_hash, ref = case
            spec = store_spec(scenario, DEFAULT_STORE)
            backend = backend_for(backends, scenario, DEFAULT_STORE)
            found = search_moves(probes, spec, backend, files, data_hash, scenario, ref)
            entries[_key(case)] = (scenario.id, found[1] if found else MoveEntry((), ()))
    finally:
        probes.teardown()
        for folder in backends.teardown():
            remove_folder(folder)
    return render_seed(entries)


def seed_problem(path: Path, cases: list[Case]) -> str | None:
    """Why the seed file at `path` is stale for `cases` (None: current, or nothing searched)."""
    held = read_seed(path)
    stale = sorted(case[0].id for case in cases if _key(case) not in held)
    if not path.is_file() and stale:
        return f"{path} is missing"
    if stale:
        more = f" and {len(stale) - 5} more" if len(stale) > 5 else ""
        return f"{path} is out of date for {', '.join(stale[:5])}{more}"
    return None
