"""The acceptance suite as a harness world: one snapshot per case, built once per data dir.

`ensure_built(data_dir, "development-<case key>")` checks the case's SQLite file against the
committed manifest; when it is missing or differs it rebuilds the whole split under a file
lock and requires the rebuilt manifest to equal the committed one (the references are
evaluator-owned: a builder that no longer reproduces them is an error, not a silent update).

The reserved split is sealed (`scenarios.acceptance.sealing`): `unseal(commitment, data_dir)`
regenerates it from the evaluator's secret into the data dir, and `reserved-<case key>`
snapshots are served from that unsealed manifest only; a reserved store that went missing or
changed since is an error, never silently rebuilt.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl
from filelock import FileLock

from scenarios.acceptance.builder import (
    BUILDER_VERSION,
    DEFAULT_SEED,
    AcceptanceSettings,
    build_acceptance,
    case_tables,
)
from scenarios.acceptance.checks import AcceptanceBuildError
from scenarios.acceptance.manifest import MANIFEST_DIR, SUITE, Manifest, load_manifest
from scenarios.acceptance.model import SPLITS
from scenarios.acceptance.rotation import RETIRED_PATH, retired_manifest
from scenarios.acceptance.sealing import COMMITMENT_PATH, load_commitment, unseal, unsealed_path
from scenarios.acceptance.storage import fingerprint
from scenarios.acceptance.verify import case_problems
from scenarios.references import REFERENCES_DIR, ReferencedWorld
from scenarios.world_base import Oracle
from stores.base import DatasetFiles

__all__ = ["MOVES_SEED", "AcceptanceWorld"]


MOVES_SEED = REFERENCES_DIR / f"{SUITE}-development.moves.json"
"""The development split's moving-probe search results (`scenarios.acceptance.moves`)."""


class AcceptanceWorld(ReferencedWorld):
    """World `acceptance-v1`: snapshot `<split>-<case key>` is one case's store."""

    name = SUITE

    def __init__(self, seed: int = DEFAULT_SEED, manifest_dir: Path = MANIFEST_DIR) -> None:
        self.seed = seed
        self.manifest_dir = manifest_dir
        self._manifests: dict[str, Manifest] = {}

    @property
    def snapshots(self) -> tuple[str, ...]:  # type: ignore[override]
        """Development snapshots, then the sealed reserved ones (named from the commitment)."""
        reserved = [c["id"] for c in load_commitment(self.commitment)["cases"]]
        return (
            *(c.snapshot for c in self.manifest("development").cases),
            *(f"reserved-{case_id.removeprefix('acc-res-')}" for case_id in reserved),
        )

    @property
    def commitment(self) -> Path:
        return self.manifest_dir / COMMITMENT_PATH.name

    def unseal(self, commitment: Path, data_dir: Path) -> tuple[Path, dict[str, Any]]:
        """`sealing.unseal`: the reserved split from the evaluator's secret, checked against
        `commitment`; afterwards `reserved-<key>` snapshots are served from it."""
        path, record = unseal(commitment, data_dir)
        self._manifests.pop("reserved", None)
        return path, record

    @property
    def config(self) -> dict[str, int]:
        return {"seed": self.seed, "builder": BUILDER_VERSION}

    def moving_probe_seed(self, snapshot: str = "base") -> Path:
        """The development split's moving-probe search results (`acceptance.moves`), one file
        for every case, beside the other worlds' (a `.json` beside the manifest would be
        collected as one)."""
        return MOVES_SEED

    @property
    def oracles(self) -> Mapping[str, Oracle]:
        """None: acceptance references live in the manifest, computed at build time."""
        return {}

    def manifest(self, split: str, data_dir: Path | None = None) -> Manifest:
        if split == "reserved":
            return self._unsealed(data_dir)
        if split.startswith("retired") and split not in self._manifests:
            path = self.manifest_dir / RETIRED_PATH.name
            self._manifests[split] = retired_manifest(int(split.removeprefix("retired")), path)
        if split not in self._manifests:
            manifest = load_manifest(split, self.manifest_dir)
            if manifest.seed != self.seed:
                raise AcceptanceBuildError(
                    f"{SUITE}/{split}: the committed manifest was built with seed "
                    f"{manifest.seed}, this world uses {self.seed}"
                )
            self._manifests[split] = manifest
        return self._manifests[split]

    def _unsealed(self, data_dir: Path | None) -> Manifest:
        if "reserved" not in self._manifests:
            path = unsealed_path(data_dir) if data_dir is not None else None
            if path is None or not path.is_file():
                raise AcceptanceBuildError(
                    f"{SUITE}/reserved is sealed and not unsealed under {data_dir}: a frozen "
                    "run (pytest -m reserved --freeze, with the evaluator's secret) unseals it"
                )
            self._manifests["reserved"] = load_manifest(path)
        return self._manifests["reserved"]

    def _split_of(self, snapshot: str) -> str:
        retired = re.match(r"(retired\d+)-", snapshot)
        split = retired.group(1) if retired else None
        split = split or next((s for s in SPLITS if snapshot.startswith(f"{s}-")), None)
        if split is None:
            raise ValueError(
                f"world {SUITE!r}: snapshot {snapshot!r} is not '<split>-<case>' with split in "
                f"{', '.join(SPLITS)}"
            )
        return split

    def generate(self, snapshot: str) -> dict[str, pl.DataFrame]:
        """A development case's tables as data frames (Decimal money as Float64, as stored)."""
        split = self._split_of(snapshot)
        if split != "development":
            raise ValueError(f"{SUITE}: {snapshot!r} is sealed; only a frozen run unseals it")
        case = case_tables(split, snapshot.removeprefix(f"{split}-"), self.seed)
        return {
            t.name: pl.DataFrame(
                [
                    tuple(float(v) if not isinstance(v, int | str | None) else v for v in r)
                    for r in t.rows
                ],
                schema={
                    n: {"INTEGER": pl.Int64, "REAL": pl.Float64}.get(k, pl.String)
                    for n, k in t.columns
                },
                orient="row",
            )
            for t in case.tables
        }

    def ensure_built(self, data_dir: Path, snapshot: str = "base") -> DatasetFiles:
        split = self._split_of(snapshot)
        manifest = self.manifest(split, data_dir)
        case = manifest.case(snapshot)
        parquet = data_dir / case.store.parquet_dir
        if split == "reserved" and (case_problems(case, data_dir) or not parquet.is_dir()):
            raise AcceptanceBuildError(
                f"{SUITE}: the unsealed store of {case.id} is missing or changed since it was "
                f"unsealed: {'; '.join(case_problems(case, data_dir)) or parquet}"
            )
        if case_problems(case, data_dir) or not parquet.is_dir():
            folder = data_dir / "acceptance"
            folder.mkdir(parents=True, exist_ok=True)
            with FileLock(str(folder / f".{split}.lock")):
                if case_problems(case, data_dir) or not parquet.is_dir():
                    self._rebuild(data_dir, manifest)
        return DatasetFiles(
            name=Path(case.store.file).stem,
            parquet_dir=parquet,
            sqlite_path=data_dir / case.store.file,
        )

    def _rebuild(self, data_dir: Path, manifest: Manifest) -> None:
        if manifest.split.startswith("retired"):
            return self._rebuild_retired(data_dir, manifest)
        built = build_acceptance(AcceptanceSettings(data_dir, self.seed), manifest.split)
        if built.to_json() != manifest.to_json():
            differing = [
                a.id for a, b in zip(built.cases, manifest.cases, strict=False) if a != b
            ] or ["(case list)"]
            raise AcceptanceBuildError(
                f"{SUITE}/{manifest.split}: the builder no longer reproduces the committed "
                f"manifest (cases {', '.join(differing)}); regenerate it deliberately with "
                "`uv run python -m scenarios.acceptance` and review the reference changes"
            )

    def verify(self, data_dir: Path, snapshot: str = "base") -> list[str]:
        """`verify_acceptance_data` for one case: its file against the manifest's checksums."""
        case = self.manifest(self._split_of(snapshot), data_dir).case(snapshot)
        return case_problems(case, data_dir)

    fingerprint_method = "sqlite-sorted-rows-v1"

    def data_hash(self, files: DatasetFiles) -> str:
        """The logical sha256 of the case's SQLite file (as recorded in the manifest)."""
        if files.sqlite_path is None:
            raise ValueError(f"acceptance dataset {files.name} has no SQLite file")
        return fingerprint(files.sqlite_path).logical

    def _rebuild_retired(self, data_dir: Path, manifest: Manifest) -> None:
        """Rebuild a retired rotation's stores from its recorded seed; each retired case must
        come back with the reference and store checksums it was retired with."""
        built = build_acceptance(AcceptanceSettings(data_dir, manifest.seed), "reserved")
        by_key = {c.snapshot.removeprefix("reserved-"): c for c in built.cases}
        differing = [
            c.id
            for c in manifest.cases
            if (b := by_key.get(c.snapshot.split("-", 1)[1])) is None
            or (b.reference, b.store) != (c.reference, c.store)
        ]
        if differing:
            raise AcceptanceBuildError(
                f"{SUITE}/{manifest.split}: the builder no longer reproduces the retired cases "
                f"{', '.join(differing)} from their recorded seed"
            )
