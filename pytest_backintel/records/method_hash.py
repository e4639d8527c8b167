"""The method hash of `run.json`: what identifies the analyst that was actually measured.

For the built-in analysts (model, calibration, replay) it covers the `analyst` package's
prompt, skills and tool code, and for a model analyst its settings too (model id, API, base
URL, limits). For a custom analyst (`--analyst pkg.module:factory`) it covers the files of the
top-level package its factory lives in (or the module file itself).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shlex
from pathlib import Path
from typing import Any

from pytest_backintel.options import BenchOptions, spec_kind
from pytest_backintel.records.writer import hash_files

__all__ = [
    "SKIPPED_DIRS",
    "SOURCE_SUFFIXES",
    "analyst_method_hash",
    "folder_files",
    "method_hash",
    "model_api_of",
    "package_files",
]

SOURCE_SUFFIXES = frozenset({".py", ".md", ".txt", ".yaml", ".yml", ".json", ".toml", ".j2"})

SKIPPED_DIRS = frozenset(
    {"__pycache__", "node_modules", ".venv", "venv", ".git", ".mypy_cache", ".pytest_cache",
     ".ruff_cache", ".hypothesis"}
)  # fmt: skip
"""Folders a method hash does not enter: installed dependencies (their lock file is hashed
instead) and tools' caches. Another process may rewrite them while a run starts."""


def folder_files(root: Path, suffixes: frozenset[str] | None = None) -> list[Path]:
    """The files under `root` (with one of `suffixes`, if given), outside `SKIPPED_DIRS`; a
    folder that vanishes while it is listed is left out, never an error."""
    found: list[Path] = []
    for here, dirs, names in os.walk(root, onerror=lambda _: None):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
        for name in names:
            path = Path(here, name)
            if (suffixes is None or path.suffix in suffixes) and path.is_file():
                found.append(path)
    return found


def package_files(module: str) -> tuple[list[Path], Path] | None:
    """The source files of `module`'s top-level package (or its single file) and their root."""
    top = module.partition(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        base = Path(next(iter(spec.submodule_search_locations)))
        return folder_files(base, SOURCE_SUFFIXES), base
    if spec.origin and Path(spec.origin).is_file():
        origin = Path(spec.origin)
        return [origin], origin.parent
    return None


def method_hash(spec: str, kind: str, settings: dict[str, Any]) -> str | None:
    """sha256 over the measured analyst's files (and a model analyst's `settings`); for an
    external agent (`cmd:`), its command, its folder's files and the model settings."""
    if kind == "external":
        return _external_hash(spec, settings)
    module = spec.partition(":")[0] if kind == "custom" else "analyst"
    found = package_files(module)
    if found is None:
        return None
    files_hash = hash_files(*found)
    if kind != "model":
        return files_hash
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(f"{files_hash}\n{text}".encode()).hexdigest()


def analyst_method_hash(opts: BenchOptions) -> str | None:
    """The method hash of the run's `--analyst` with its model settings."""
    settings = {
        "model": opts.model,
        "model_api": model_api_of(opts),
        "model_base_url": opts.model_base_url,
        "limits": vars(opts.limits),
    }
    return method_hash(opts.analyst, spec_kind(opts.analyst), settings)


def model_api_of(opts: BenchOptions) -> str | None:
    """The API the model analyst reaches its model through (None without a model)."""
    if opts.model is None or opts.analyst != "model":
        return None
    from analyst.models import model_api

    return model_api(opts.model, opts.model_base_url)


def _external_hash(spec: str, settings: dict[str, Any]) -> str:
    """The command, every file of the folder of the first file it names (the folder mounted
    for the agent; installed dependencies by their lock file), and the model settings its
    requests go through."""
    command = spec.removeprefix("cmd:").strip()
    files: list[Path] = []
    root: Path | None = None
    with contextlib.suppress(ValueError):
        for arg in shlex.split(command):
            if Path(arg).is_file():
                root = Path(arg).resolve().parent
                files = folder_files(root)
                break
    text = json.dumps({"command": command, **settings}, sort_keys=True, default=str)
    return hashlib.sha256(f"{hash_files(files, root)}\n{text}".encode()).hexdigest()
