"""The evaluator-owned acceptance manifest: cases, references, store checksums, planting.

A manifest is plain JSON written with sorted keys and a fixed layout, so the same build gives
the same bytes. The development manifest is committed beside this module
(`acceptance-v1/development.json`); it must never be mounted in an analyst sandbox. The reserved
manifest is never committed: it is generated from the evaluator's secret at run time
(`scenarios.acceptance.sealing`), and only its commitment is in the repository.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_backintel.scenario import Scenario

__all__ = [
    "MANIFEST_DIR",
    "MANIFEST_FILES",
    "SUITE",
    "Manifest",
    "ManifestCase",
    "StoreRecord",
    "load_manifest",
    "manifest_path",
]

SUITE = "acceptance-v1"
MANIFEST_DIR = Path(__file__).resolve().parent / SUITE
MANIFEST_FILES = {"development": "development.json"}
SEALED = (
    "the reserved split is sealed: its manifest is generated from the evaluator's secret "
    "(scenarios.acceptance.sealing.unseal), never read from the repository"
)


@dataclass(frozen=True)
class StoreRecord:
    """A case's SQLite file (relative to the data dir), its tables and checksums."""

    file: str
    tables: tuple[str, ...]
    logical_sha256: str
    physical_sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "tables": list(self.tables),
            "logical_sha256": self.logical_sha256,
            "physical_sha256": self.physical_sha256,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StoreRecord:
        return cls(
            file=str(data["file"]),
            tables=tuple(data["tables"]),
            logical_sha256=str(data["logical_sha256"]),
            physical_sha256=str(data["physical_sha256"]),
        )

    @property
    def parquet_dir(self) -> str:
        """The Parquet folder beside the SQLite file (same tables), relative to the data dir."""
        return self.file.removesuffix(".sqlite") + ".parquet"


@dataclass(frozen=True)
class ManifestCase:
    """One case: its scenario (a `Scenario` dict), reference, store, planting and conditions."""

    scenario: dict[str, Any]
    reference: dict[str, int | float | str]
    store: StoreRecord
    planting: dict[str, Any]
    conditions: str

    @property
    def id(self) -> str:
        return str(self.scenario["id"])

    @property
    def snapshot(self) -> str:
        return str(self.scenario["dataset"]["snapshot"])

    def to_scenario(self) -> Scenario:
        return Scenario.model_validate(self.scenario)

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "reference": self.reference,
            "store": self.store.to_dict(),
            "planting": self.planting,
            "conditions": self.conditions,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ManifestCase:
        return cls(
            scenario=dict(data["scenario"]),
            reference=dict(data["reference"]),
            store=StoreRecord.from_dict(data["store"]),
            planting=dict(data["planting"]),
            conditions=str(data["conditions"]),
        )


@dataclass(frozen=True)
class Manifest:
    """All cases of one split of the suite, with the builder settings that produced them."""

    suite: str
    split: str
    seed: int
    builder_version: int
    cases: tuple[ManifestCase, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "split": self.split,
            "builder": {"seed": self.seed, "version": self.builder_version},
            "cases": [c.to_dict() for c in self.cases],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        return cls(
            suite=str(data["suite"]),
            split=str(data["split"]),
            seed=int(data["builder"]["seed"]),
            builder_version=int(data["builder"]["version"]),
            cases=tuple(ManifestCase.from_dict(c) for c in data["cases"]),
        )

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json(), encoding="utf-8")

    def case(self, case_id: str) -> ManifestCase:
        for case in self.cases:
            if case_id in (case.id, case.snapshot):
                return case
        known = ", ".join(c.id for c in self.cases)
        raise KeyError(f"{self.suite}/{self.split} has no case {case_id!r}; cases: {known}")


def manifest_path(split: str, root: Path = MANIFEST_DIR) -> Path:
    if split == "reserved":
        raise ValueError(SEALED)
    try:
        return root / MANIFEST_FILES[split]
    except KeyError:
        raise ValueError(
            f"unknown acceptance split {split!r}; allowed: {', '.join(MANIFEST_FILES)}"
        ) from None


def load_manifest(source: str | Path, root: Path = MANIFEST_DIR) -> Manifest:
    """A manifest from a split name (`development`, `reserved`) or a JSON file path."""
    if str(source) == "reserved":
        raise ValueError(SEALED)
    path = manifest_path(str(source), root) if str(source) in MANIFEST_FILES else Path(source)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read acceptance manifest {path}: {exc}") from exc
    return Manifest.from_dict(data)
