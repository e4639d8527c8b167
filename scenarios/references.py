"""Evaluator-owned references: oracles cross-checked by SQL at build time, stored as JSON.

`build_references` runs every answerable scenario's polars oracle over the world's canonical
Parquet and its separately written `check_sql` over the world's SQLite file (read-only), and
aborts with `ReferenceMismatchError` on any disagreement. The result is written to
`scenarios/references/<world>.json` (or `<world>-<snapshot>.json`) with the data hash it was
computed from; `reference_for` refuses references whose data hash differs from the data a run
uses. Snapshots are resolved by the world first (`World.resolve_snapshot`): TPC-H's `base`
means `sf$BACKINTEL_TPCH_SF`, so its references live in `tpch-sf<sf>.json`. Check queries run on
the world's SQLite file with every declared part (`extra["sqlite:<alias>"]`) attached read-only
under its alias, as the split worlds need.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_backintel.collect.loading import load_scenario_file
from pytest_backintel.scenario import Scenario
from scenarios.moving_seed import build_seed, moves_path, seed_problem, world_cases
from scenarios.reference_checks import attach_parts, checked_values, computed_reference
from scenarios.reference_errors import (
    ReferenceError,
    ReferenceMismatchError,
    ReferencesOutOfDateError,
    StaleReferencesError,
)
from scenarios.world_base import UnknownWorldError, World, data_dir, get_world
from stores.base import DatasetFiles

__all__ = [
    "DEFINITIONS_DIR",
    "REBUILD_HINT",
    "REFERENCES_DIR",
    "ReferenceError",
    "ReferenceMismatchError",
    "ReferenceSet",
    "ReferencedWorld",
    "ReferencesOutOfDateError",
    "StaleReferencesError",
    "attach_parts",
    "build_all",
    "build_references",
    "check_data_hash",
    "load_references",
    "load_scenarios",
    "reference_for",
    "references_path",
    "render_references",
]

HERE = Path(__file__).resolve().parent
DEFINITIONS_DIR = HERE / "definitions"
REFERENCES_DIR = HERE / "references"
REBUILD_HINT = "rebuild them with `uv run backintel references benchmark`"


@dataclass(frozen=True)
class ReferenceSet:
    """A loaded references file."""

    path: Path
    world: str
    snapshot: str
    config: dict[str, Any]
    data_hash: str
    references: dict[str, dict[str, Any]]
    """Scenario id -> {"version": n, "values": {metric: value} or None (unanswerable)}."""


def references_path(world: str, snapshot: str = "base", root: Path = REFERENCES_DIR) -> Path:
    """`<root>/<world>.json` for the base snapshot, `<world>-<snapshot>.json` otherwise.

    `snapshot` is the resolved name (`resolved_snapshot`), e.g. `sf1` for TPC-H's `base`."""
    return root / (f"{world}.json" if snapshot == "base" else f"{world}-{snapshot}.json")


def resolved_snapshot(world: str, snapshot: str) -> str:
    """The snapshot `world` means by `snapshot` (`World.resolve_snapshot`); unchanged for a
    world that is not registered."""
    try:
        return get_world(world).resolve_snapshot(snapshot)
    except UnknownWorldError:
        return snapshot


def load_scenarios(root: Path = DEFINITIONS_DIR) -> list[Scenario]:
    """Every `*.scenario.yaml` under `root`, validated, sorted by id; repeated ids are errors."""
    seen: dict[str, Path] = {}
    out: list[Scenario] = []
    for path in sorted(root.rglob("*.scenario.yaml")):
        scenario = load_scenario_file(path)
        if scenario.id in seen:
            raise ReferenceError(f"{path}: scenario id {scenario.id!r} also in {seen[scenario.id]}")
        seen[scenario.id] = path
        out.append(scenario)
    return sorted(out, key=lambda s: s.id)


def build_references(
    scenarios: Iterable[Scenario], world: World, files: DatasetFiles, snapshot: str = "base"
) -> dict[str, Any]:
    """References for `scenarios` of `world`, each oracle cross-checked by its check_sql.

    Scenarios must be bound to `snapshot` once both are resolved (`World.resolve_snapshot`);
    the document records the resolved name."""
    snapshot = world.resolve_snapshot(snapshot)
    refs: dict[str, Any] = {}
    for scenario in sorted(scenarios, key=lambda s: s.id):
        bound = scenario.dataset.snapshot
        if scenario.dataset.world != world.name or world.resolve_snapshot(bound) != snapshot:
            raise ReferenceError(
                f"scenario {scenario.id!r} is bound to {scenario.dataset.world}/{bound}, not "
                f"{world.name}/{snapshot}"
            )
        values = checked_values(scenario, world, files) if scenario.answerable else None
        refs[scenario.id] = {"version": scenario.version, "values": values}
    return {
        "world": world.name,
        "snapshot": snapshot,
        "config": world.config,
        "data_hash": world.data_hash(files),
        "references": refs,
    }


def render_references(doc: Mapping[str, Any]) -> str:
    """The canonical JSON text of a references document (sorted keys, trailing newline)."""
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def load_references(path: Path) -> ReferenceSet:
    """Read a references file; errors say which file and what is wrong."""
    if not path.is_file():
        raise StaleReferencesError(f"no references file {path}; {REBUILD_HINT}")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return ReferenceSet(
            path=path,
            world=str(doc["world"]),
            snapshot=str(doc["snapshot"]),
            config=dict(doc["config"]),
            data_hash=str(doc["data_hash"]),
            references={str(k): dict(v) for k, v in doc["references"].items()},
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ReferenceError(f"{path}: not a references file ({exc!r}); {REBUILD_HINT}") from exc


def check_data_hash(refs: ReferenceSet, data_hash: str) -> None:
    """Refuse references computed from other data than the store's."""
    if refs.data_hash != data_hash:
        raise StaleReferencesError(
            f"{refs.path} was built for {refs.world} data with hash {refs.data_hash[:16]}… "
            f"(config {refs.config}), but the data in use has hash {data_hash[:16]}…. Either "
            f"the generator, its config (e.g. BACKINTEL_OLIST_ORDERS) or the data changed; "
            f"{REBUILD_HINT}, or restore the config the references were built with."
        )


_CACHE: dict[tuple[Path, int], ReferenceSet] = {}


def _load_cached(path: Path) -> ReferenceSet:
    key = (path, path.stat().st_mtime_ns if path.exists() else -1)
    if key not in _CACHE:
        _CACHE[key] = load_references(path)
    return _CACHE[key]


def reference_for(
    scenario: Scenario, data_hash: str, root: Path = REFERENCES_DIR
) -> Mapping[str, Any]:
    """The reference values of one answerable scenario ({} for an unanswerable one), after
    checking the data hash and the scenario version (the file is the one of the resolved
    snapshot, e.g. `tpch-sf0.01.json` when BACKINTEL_TPCH_SF=0.01)."""
    world = scenario.dataset.world
    snapshot = resolved_snapshot(world, scenario.dataset.snapshot)
    refs = _load_cached(references_path(world, snapshot, root))
    check_data_hash(refs, data_hash)
    entry = refs.references.get(scenario.id)
    if entry is None:
        raise StaleReferencesError(
            f"{refs.path} has no reference for {scenario.id!r}; {REBUILD_HINT}"
        )
    if entry.get("version") != scenario.version:
        raise StaleReferencesError(
            f"{refs.path}: reference for {scenario.id!r} is version {entry.get('version')}, the "
            f"scenario is version {scenario.version}; {REBUILD_HINT}"
        )
    values = entry.get("values")
    if scenario.answerable and not isinstance(values, dict):
        raise StaleReferencesError(
            f"{refs.path}: {scenario.id!r} has no values but is answerable; {REBUILD_HINT}"
        )
    return dict(values or {})


def build_all(
    write: bool = True,
    *,
    definitions: Path = DEFINITIONS_DIR,
    out_dir: Path = REFERENCES_DIR,
    data_root: Path | None = None,
) -> dict[str, dict[str, Any]]:
    """Build (and with `write`, save) the references of every world the scenarios use.

    Scenarios are grouped by world and resolved snapshot (`World.resolve_snapshot`). With
    `write=False` nothing is written and `ReferencesOutOfDateError` is raised when a committed
    file is missing (before building that world's data) or differs from the fresh build.
    Each references file gets its moving-probe seed beside it (`moving_seed`), checked for
    being current with `write=False`. Returns file name -> references document."""
    groups: dict[tuple[str, str], list[Scenario]] = defaultdict(list)
    worlds: dict[str, World] = {}
    for scenario in load_scenarios(definitions):
        name = scenario.dataset.world
        if name not in worlds:
            worlds[name] = get_world(name)
        groups[(name, worlds[name].resolve_snapshot(scenario.dataset.snapshot))].append(scenario)
    built: dict[str, dict[str, Any]] = {}
    for (world_name, snapshot), scenarios in sorted(groups.items()):
        world = worlds[world_name]
        path = references_path(world_name, snapshot, out_dir)
        if not write and not path.is_file():
            bound = sorted({s.dataset.snapshot for s in scenarios})
            raise ReferencesOutOfDateError(
                f"no references are committed for world {world_name!r} snapshot {snapshot!r} "
                f"(what scenarios bound to {', '.join(bound)} resolve to in this environment): "
                f"{path} is missing, so it differs from a fresh build; {REBUILD_HINT} with the "
                "same environment (e.g. BACKINTEL_TPCH_SF), or choose a snapshot whose "
                "references are committed"
            )
        files = world.ensure_built(data_root or data_dir(), snapshot)
        doc = build_references(scenarios, world, files, snapshot)
        text = render_references(doc)
        seed, stored = moves_path(path), json.loads(text)
        if write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            if cases := world_cases(scenarios, files, stored):  # none in a prediction world
                seed.write_text(build_seed(cases, data_root or data_dir()), encoding="utf-8")
        elif not path.is_file() or path.read_text(encoding="utf-8") != text:
            raise ReferencesOutOfDateError(f"{path} differs from a fresh build; {REBUILD_HINT}")
        elif (why := seed_problem(seed, world_cases(scenarios, files, stored))) is not None:
            raise ReferencesOutOfDateError(
                f"{why} (the moving-probe search results a fresh clone starts from); {REBUILD_HINT}"
            )
        predicted = sum(1 for s in scenarios if s.prediction is not None)
        answerable = sum(1 for s in scenarios if s.answerable) - predicted
        checked = f"{answerable} cross-checked by SQL" + (
            f", {predicted} prediction checked on permuted labels and shuffled features"
            if predicted
            else ""
        )
        print(
            f"{path.name}: {len(scenarios)} scenarios ({checked}), "
            f"data hash {doc['data_hash'][:16]}… {'written' if write else 'up to date'}"
        )
        built[path.name] = doc
    return built


class ReferencedWorld(World):
    """A world whose references are the committed reference files (computed by the oracles
    for data that has none, such as the real Olist release serving `olist`)."""

    def moving_probe_seed(self, snapshot: str = "base") -> Path:
        """The committed moving-probe search results beside the snapshot's references
        (`scenarios.moving_seed`), a read-only seed of a run's cache."""
        return moves_path(references_path(self.name, self.resolve_snapshot(snapshot)))

    def reference(
        self, scenario: Scenario, files: DatasetFiles, data_hash: str
    ) -> Mapping[str, Any]:
        """The committed reference of `scenario`, checked against the data hash; for data
        with no committed references (the real Olist release serving `olist`), computed now by
        the oracles and cross-checked by the check query."""
        if self.name != scenario.dataset.world:
            return computed_reference(scenario, self, files)
        return reference_for(scenario, data_hash)
