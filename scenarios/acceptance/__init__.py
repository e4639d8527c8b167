"""The acceptance suite v1: controlled cases, cross-checked references, manifests, verification.

from scenarios.acceptance import AcceptanceSettings, build_acceptance, verify_acceptance_data
manifest = build_acceptance(AcceptanceSettings(data_dir), split="development")
verify_acceptance_data(manifest, AcceptanceSettings(data_dir))
"""

from scenarios.acceptance.builder import (
    DEFAULT_SEED,
    AcceptanceSettings,
    build_acceptance,
)
from scenarios.acceptance.checks import AcceptanceBuildError
from scenarios.acceptance.manifest import Manifest, ManifestCase, load_manifest, manifest_path
from scenarios.acceptance.verify import AcceptanceDataError, verify_acceptance_data

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
