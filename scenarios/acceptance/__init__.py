"""The acceptance suite v1: controlled cases, cross-checked references, manifests, verification.

from scenarios.acceptance import AcceptanceSettings, build_acceptance, verify_acceptance_data
manifest = build_acceptance(AcceptanceSettings(data_dir), split="development")
verify_acceptance_data(manifest, AcceptanceSettings(data_dir))

The names are imported on first use: the `backintel` command line registers this package's
subcommands without loading polars.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scenarios.acceptance.builder import DEFAULT_SEED, AcceptanceSettings, build_acceptance
    from scenarios.acceptance.checks import AcceptanceBuildError
    from scenarios.acceptance.manifest import (
        Manifest,
        ManifestCase,
        load_manifest,
        manifest_path,
    )
    from scenarios.acceptance.verify import AcceptanceDataError, verify_acceptance_data

_HOME = {
    "DEFAULT_SEED": "builder",
    "AcceptanceSettings": "builder",
    "build_acceptance": "builder",
    "AcceptanceBuildError": "checks",
    "Manifest": "manifest",
    "ManifestCase": "manifest",
    "load_manifest": "manifest",
    "manifest_path": "manifest",
    "AcceptanceDataError": "verify",
    "verify_acceptance_data": "verify",
}

__all__ = [
    "DEFAULT_SEED",
    "AcceptanceBuildError",
    "AcceptanceDataError",
    "AcceptanceSettings",
    "Manifest",
    "ManifestCase",
    "build_acceptance",
    "load_manifest",
    "manifest_path",
    "verify_acceptance_data",
]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(import_module(f"scenarios.acceptance.{_HOME[name]}"), name)
    raise AttributeError(f"module 'scenarios.acceptance' has no attribute {name!r}")
