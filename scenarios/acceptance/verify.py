"""Checking acceptance fixture files against their manifest before and after every trial."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from scenarios.acceptance.builder import AcceptanceSettings
from scenarios.acceptance.manifest import Manifest, ManifestCase, load_manifest
from scenarios.acceptance.storage import fingerprint
from stores.base import StoreError

__all__ = ["AcceptanceDataError", "case_problems", "verify_acceptance_data"]


class AcceptanceDataError(Exception):
    """A fixture file is missing or differs from its manifest; the message names the file and
    which checksum (logical, physical) changed."""


def case_problems(case: ManifestCase, data_dir: Path) -> list[str]:
    """What is wrong with one case's SQLite file (empty when it matches its manifest)."""
    path = data_dir / case.store.file
    where = f"{path} (case {case.id})"
    if not path.is_file():
        return [f"{where}: file is missing; rebuild the split with build_acceptance"]
    try:
        prints = fingerprint(path)
    except (sqlite3.Error, StoreError) as exc:
        return [f"{where}: not a readable SQLite database ({exc}); logical checksum unknown"]
    problems = []
    if prints.logical != case.store.logical_sha256:
        problems.append(
            f"{where}: logical checksum changed (tables/rows differ): manifest "
            f"{case.store.logical_sha256}, file {prints.logical}"
        )
    if prints.physical != case.store.physical_sha256:
        problems.append(
            f"{where}: physical checksum changed (file bytes differ): manifest "
            f"{case.store.physical_sha256}, file {prints.physical}"
        )
    return problems


def verify_acceptance_data(suite: Manifest | str | Path, settings: AcceptanceSettings) -> None:
    """Raise `AcceptanceDataError` if any fixture file of `suite` (a manifest, a split name or
    a manifest path) is missing or differs from its recorded checksums."""
    manifest = suite if isinstance(suite, Manifest) else load_manifest(suite)
    problems = [p for case in manifest.cases for p in case_problems(case, settings.data_dir)]
    if problems:
        raise AcceptanceDataError(
            f"{manifest.suite}/{manifest.split}: {len(problems)} fixture problem(s):\n"
            + "\n".join(f"- {p}" for p in problems)
        )
