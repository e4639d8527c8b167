"""The moving-probe search's results on disk (`probe_moves`), so a later process skips it.

An entry is named by a hash of everything that decides the search (`move_key`): the perturbation
version, the search's attempt counts, the dataset's data hash, the store spec, the scenario (id,
version, check query, metrics) and the reference (its answer texts and a hash of its values).
Its value is the winning salts in order, each with the metrics it moved, and the metrics nothing
moved. An entry is a claim, never trusted: `probe_moves` builds the winners and checks that each
still moves what it moved, and searches again (overwriting the entry) on any disagreement.

Entries live one file each under the run's data dir (`MoveCache.folder`), written to a temporary
file and renamed, so concurrent workers read whole entries or none. A seed file (a world's
`moving_probe_seed(snapshot)`, committed beside its references by `backintel references
benchmark`) is read as well, never written: a fresh clone starts with the shipped results.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_backintel.evidence.perturb_families import FAMILY_ATTEMPTS
from pytest_backintel.scenario import Scenario
from stores.common.view_plan import PERTURB_VERSION

__all__ = [
    "SEED_FORMAT",
    "MoveCache",
    "MoveEntry",
    "move_key",
    "read_seed",
    "render_seed",
    "world_seed",
]

SEED_FORMAT = 1
"""The layout of an entry and of a seed file; bump it when either changes."""


@dataclass(frozen=True)
class MoveEntry:
    """The search's result: each winning salt with the metrics it moved, in the order found,
    and the metrics no probe moved."""

    moves: tuple[tuple[int, tuple[str, ...]], ...]
    unmoved: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "moves": [[salt, list(moved)] for salt, moved in self.moves],
            "unmoved": list(self.unmoved),
        }

    @classmethod
    def from_json(cls, raw: Any) -> MoveEntry | None:
        """The entry in `raw`, or None when it is not one (a damaged file is a miss)."""
        try:
            moves = tuple((int(salt), tuple(str(m) for m in moved)) for salt, moved in raw["moves"])
            return cls(moves, tuple(str(m) for m in raw["unmoved"]))
        except (KeyError, TypeError, ValueError):
            return None


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def move_key(
    spec: str,
    data_hash: str,
    scenario: Scenario,
    texts: tuple[str, ...],
    reference: Mapping[str, Any],
    move_attempts: int,
) -> str:
    """The name of the search's result for this dataset, store spec, scenario and reference."""
    return _digest(
        {
            "format": SEED_FORMAT,
            "perturb": PERTURB_VERSION,
            "attempts": [move_attempts, FAMILY_ATTEMPTS],
            "data": data_hash,
            "spec": spec,
            "scenario": [scenario.id, scenario.version, scenario.check_sql],
            "metrics": [m.model_dump(mode="json") for m in scenario.metrics],
            "texts": list(texts),
            "reference": _digest(dict(reference)),
        }
    )


def read_seed(path: Path) -> dict[str, MoveEntry]:
    """The entries of a seed file by key ({} when it is absent or damaged)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("format") != SEED_FORMAT:
            return {}
        found = {k: MoveEntry.from_json(v) for k, v in doc["entries"].items()}
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return {}
    return {k: v for k, v in found.items() if v is not None}


def render_seed(entries: Mapping[str, tuple[str, MoveEntry]]) -> str:
    """A seed file's text: per key, the scenario id (for a reader) and the entry."""
    doc = {
        "format": SEED_FORMAT,
        "note": "moving-probe search results; written by `backintel references benchmark`",
        "entries": {
            key: {"scenario": sid, **entry.to_json()}
            for key, (sid, entry) in sorted(entries.items(), key=lambda kv: (kv[1][0], kv[0]))
        },
    }
    return json.dumps(doc, indent=1) + "\n"


def world_seed(world: object, snapshot: str) -> Path | None:
    """The seed file a world declares for a snapshot (`moving_probe_seed`), if any."""
    declared = getattr(world, "moving_probe_seed", None)
    return declared(snapshot) if callable(declared) else None


class MoveCache:
    """Entries under `folder`, with those of a read-only `seed` file behind them."""

    def __init__(self, folder: Path, seed: Path | None = None) -> None:
        self.folder = folder
        self.seed = seed

    def read(self, key: str) -> MoveEntry | None:
        """The entry of `key` (this cache's own first, then the seed's), or None."""
        try:
            raw = json.loads((self.folder / f"{key}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raw = None
        entry = MoveEntry.from_json(raw) if isinstance(raw, dict) else None
        if entry is None and self.seed is not None:
            entry = read_seed(self.seed).get(key)
        return entry

    def write(self, key: str, entry: MoveEntry) -> None:
        """Store `entry` under `key` atomically; a cache that cannot be written is skipped."""
        tmp = None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}-", dir=self.folder)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(entry.to_json(), out)
            os.replace(tmp, self.folder / f"{key}.json")
        except OSError:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
