"""The store of one data probe: views over the source, or a perturbed copy of the dataset
(a world's Parquet, or a user's SQLite, DuckDB or CSV source) provisioned on the backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stores.base import DatasetFiles, ProvisionedStore, Store

__all__ = ["probe_store"]


def probe_store(
    backend: Store,
    files: DatasetFiles,
    cache_dir: Path,
    salt: int,
    data_hash: str | None,
    moving: tuple[str, ...] | None,
    views: Any,
) -> tuple[ProvisionedStore, list[str]]:
    """The probe's store and the tables it keeps whole, with why: views when `views` (kind,
    plans, notes) is given, else a copy perturbed by `salt` under `cache_dir`."""
    if views is not None:
        kind, plan, notes = views
        return kind.probe(backend, files, cache_dir, salt, data_hash, plan, notes), notes
    # imported here: only a run whose answers cite evidence builds probes (polars, Arrow)
    from pytest_backintel.evidence.perturb import (
        FILE_FORMS,
        notes_of,
        perturb_dataset,
        source_form,
    )

    form = source_form(files)
    if form == "parquet":
        sqlite = backend.capabilities.reads_sqlite_file
        copy = perturb_dataset(files, cache_dir, salt, moving, sqlite)
        return backend.provision(copy), notes_of(copy)
    if form not in FILE_FORMS:
        raise ValueError(f"no perturbed copy can be made of {files.name!r} ({form})")
    if data_hash is None:
        raise ValueError(f"the {form} source of {files.name!r} has no data hash")
    from pytest_backintel.evidence.perturb_sources import perturb_source

    copy = perturb_source(files, form, cache_dir, salt, data_hash, moving)
    return backend.provision(copy), notes_of(copy)
