"""The development split's moving-probe search results (`scenarios.moving_seed`), committed as
`scenarios/references/acceptance-v1-development.moves.json` and written or checked with the
references by `backintel references benchmark`."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_backintel.collect.manifests import bound, manifest_reference
from pytest_backintel.scenario import Scenario
from scenarios.acceptance.manifest import SUITE, manifest_path
from scenarios.acceptance.world import MOVES_SEED
from scenarios.moving_seed import Case, build_seed, seed_problem, seeded_scenarios
from scenarios.world_base import get_world

__all__ = ["acceptance_seed"]


def _cases(data_root: Path) -> list[Case]:
    path = manifest_path("development")
    found = [
        bound(Scenario.model_validate(c["scenario"])) for c in json.loads(path.read_text())["cases"]
    ]
    world = get_world(SUITE)
    cases: list[Case] = []
    for scenario in seeded_scenarios(found):
        files = world.ensure_built(data_root, scenario.dataset.snapshot)
        ref = dict(manifest_reference(path, scenario.id))
        cases.append((scenario, files, world.data_hash(files), ref))
    return cases


def acceptance_seed(write: bool, data_root: Path) -> str | None:
    """Write the seed (`write`), or say why the committed one is stale (None: current)."""
    cases = _cases(data_root)
    if write:
        MOVES_SEED.write_text(build_seed(cases, data_root), encoding="utf-8")
        return None
    return seed_problem(MOVES_SEED, cases)
