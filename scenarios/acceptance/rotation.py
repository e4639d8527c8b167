"""Rotating the sealed reserved split: retire used cases to regression, issue a new secret.

`rotate` unseals the current split with the current secret (so it is verified against its
commitment first), appends the used cases to `acceptance-v1/retired.json` — a regression
manifest, with the retired variant's derived seed so its stores can be rebuilt without any
secret — draws a new secret (written to a file outside the repository, mode 0600) whose variant
repeats no development value, and writes the new commitment with the rotation number raised.
A retired case is public from then on: it was used, so it can no longer measure anything held
out.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from pytest_backintel.collect.sealed import SealedSuiteError
from scenarios.acceptance.manifest import MANIFEST_DIR, SUITE, Manifest, ManifestCase, load_manifest
from scenarios.acceptance.sealing import (
    COMMITMENT_PATH,
    REPO_ROOT,
    build_reserved,
    commitment_for,
    draw_secret,
    load_commitment,
    read_secret,
    unseal,
    write_commitment,
)

__all__ = ["RETIRED_PATH", "retired_manifest", "rotate"]

RETIRED_PATH = MANIFEST_DIR / "retired.json"


def _load(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {"suite": f"{SUITE}-retired", "split": "regression", "rotations": [], "cases": []}
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def retired_manifest(rotation: int, path: Path = RETIRED_PATH) -> Manifest:
    """The retired cases of one rotation, as a manifest whose seed rebuilds their stores."""
    data = _load(path)
    meta = next((r for r in data["rotations"] if r["rotation"] == rotation), None)
    if meta is None:
        raise KeyError(f"{path}: no retired rotation {rotation}")
    cases = tuple(ManifestCase.from_dict(c) for c in data["cases"] if c.get("rotation") == rotation)
    return Manifest(SUITE, f"retired{rotation}", int(meta["seed"]), int(meta["version"]), cases)


def _retire(case: ManifestCase, rotation: int) -> dict[str, Any]:
    key = case.snapshot.removeprefix("reserved-")
    scenario = dict(case.scenario) | {
        "id": f"acc-ret{rotation}-{key}",
        "split": "regression",
        "dataset": {"world": SUITE, "snapshot": f"retired{rotation}-{key}"},
    }
    return {**case.to_dict(), "scenario": scenario, "rotation": rotation}


def _write_secret(path: Path, secret: str) -> None:
    path = path.expanduser().resolve()
    if path.is_relative_to(REPO_ROOT.resolve()):
        raise SealedSuiteError(f"--secret-out {path}: keep the secret outside the repository")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(secret + "\n")


def rotate(
    used: list[str] | None,
    secret_out: Path,
    data_dir: Path,
    commitment: Path = COMMITMENT_PATH,
    retired: Path = RETIRED_PATH,
) -> dict[str, Any]:
    """Retire `used` case ids (None: every case) and issue a new secret and commitment."""
    old = read_secret()
    rotation = int(load_commitment(commitment)["sealed"].get("rotation", 1))
    current = load_manifest(unseal(commitment, data_dir, old)[0])
    known = [c.id for c in current.cases]
    chosen = known if used is None else used
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        raise SealedSuiteError(f"not reserved cases of {SUITE}: {unknown}; cases: {known}")
    if secret_out.expanduser().exists():
        raise SealedSuiteError(f"--secret-out {secret_out} exists; name a new file")
    data = _load(retired)
    data["rotations"].append(
        {
            "rotation": rotation,
            "seed": current.seed,
            "version": current.builder_version,
            "used": sorted(chosen),
        }
    )
    data["cases"] += [_retire(c, rotation) for c in current.cases if c.id in chosen]
    with tempfile.TemporaryDirectory(prefix="backintel-rotate-") as scratch:
        new = draw_secret(load_manifest("development"), Path(scratch))
        fresh = commitment_for(
            build_reserved(new.encode(), Path(scratch)), new.encode(), rotation + 1
        )
    _write_secret(secret_out, new)
    write_commitment(fresh, commitment)
    retired.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return {
        "retired": sorted(chosen),
        "rotation": rotation + 1,
        "secret_id": fresh["sealed"]["secret_id"],
        "secret_file": str(secret_out),
        "commitment": str(commitment),
        "regression_manifest": str(retired),
    }
