"""The improvement worker's file allowlist, and the check of a candidate's diff against it.

`worker-allowlist.toml` at the repository root lists, as globs relative to the root (`*` within
a folder, `**` across folders), the paths an improvement worker may edit (`[edit] paths`) and
read (`[read] paths`). A candidate whose diff against the last frozen baseline touches any path
outside `edit` is refused, each such path named: a worker cannot tune the scenarios, the
references, the manifests, the commitment, the harness or the scorer to its candidate.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ALLOWLIST_FILE",
    "Allowlist",
    "AllowlistError",
    "check_worker_diff",
    "glob_match",
    "last_frozen_sha",
    "load_allowlist",
]

ALLOWLIST_FILE = "worker-allowlist.toml"


class AllowlistError(Exception):
    """The allowlist is unreadable, a commit is unknown, or a candidate edits outside it."""


def glob_match(pattern: str, path: str) -> bool:
    """`path` (posix, relative) matches `pattern`: `**/` any folders, `**` anything, `*` and
    `?` within one path segment."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.fullmatch(out, path) is not None


@dataclass(frozen=True)
class Allowlist:
    """What an improvement worker may edit and read."""

    path: Path
    edit: tuple[str, ...]
    read: tuple[str, ...]
    sha256: str

    def may_edit(self, path: str) -> bool:
        return any(glob_match(p, path) for p in self.edit)

    def may_read(self, path: str) -> bool:
        return self.may_edit(path) or any(glob_match(p, path) for p in self.read)


def _globs(data: dict[str, Any], section: str, path: Path) -> tuple[str, ...]:
    paths = data.get(section, {}).get("paths") if isinstance(data.get(section), dict) else None
    if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
        raise AllowlistError(f"{path}: [{section}] paths must be a list of glob strings")
    return tuple(paths)


def load_allowlist(root: Path, ref: str | None = None) -> Allowlist | None:
    """The root's allowlist (as committed at `ref`, else in the work tree), or None when the
    repository has none."""
    path = root / ALLOWLIST_FILE
    if ref is not None:
        shown = subprocess.run(
            ["git", "show", f"{ref}:{ALLOWLIST_FILE}"], cwd=root, capture_output=True, check=False
        )
        if shown.returncode == 0:
            raw = shown.stdout
        elif not path.is_file():
            return None
        else:
            raw = path.read_bytes()
    elif not path.is_file():
        return None
    else:
        raw = path.read_bytes()
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise AllowlistError(f"{path}: not valid TOML: {exc}") from exc
    edit, read = _globs(data, "edit", path), _globs(data, "read", path)
    return Allowlist(path, edit, read, hashlib.sha256(raw).hexdigest())


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise AllowlistError(f"git {' '.join(args)}: {done.stderr.strip() or 'failed'}")
    return done.stdout


def _commit(root: Path, ref: str, what: str) -> str:
    try:
        return _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").strip()
    except AllowlistError:
        raise AllowlistError(
            f"{what} {ref!r} is not a commit of the repository at {root}"
        ) from None


def last_frozen_sha(results_dir: Path) -> str | None:
    """The candidate commit of the most recent frozen run registered under `results_dir` that
    locked its plan (a run refused before that never measured anything)."""
    path = results_dir / "frozen-runs.jsonl"
    if not path.is_file():
        return None
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for line in reversed(lines):
        entry = json.loads(line)
        sha = entry.get("candidate", {}).get("git_sha")
        if sha and (results_dir / str(entry.get("run_id")) / "freeze.lock.json").exists():
            return str(sha)
    return None


def check_worker_diff(
    root: Path, results_dir: Path, baseline: str | None = None, candidate: str = "HEAD"
) -> dict[str, Any]:
    """Refuse a candidate whose diff against the baseline (given, else the last frozen run's
    commit) touches a path outside the allowlist's `edit` globs; return what was checked.
    The allowlist is the baseline's, so a candidate cannot widen its own."""
    cand = _commit(root, candidate, "candidate")
    base_ref = baseline or last_frozen_sha(results_dir)
    what = "--freeze-baseline" if baseline else f"the last frozen run's commit (in {results_dir})"
    base = _commit(root, base_ref, what) if base_ref else None
    allowlist = load_allowlist(root, base)
    record: dict[str, Any] = {
        "allowlist": str(allowlist.path) if allowlist else None,
        "allowlist_sha256": allowlist.sha256 if allowlist else None,
        "baseline": None,
        "candidate": cand,
        "changed": [],
    }
    if allowlist is None or base is None:
        return record
    changed = sorted(
        p
        for p in _git(root, "diff", "--name-only", "--no-renames", "-z", base, cand).split("\0")
        if p
    )
    outside = [p for p in changed if not allowlist.may_edit(p)]
    if outside:
        raise AllowlistError(
            f"candidate {cand[:12]} changes {len(outside)} path(s) outside the worker allowlist "
            f"({allowlist.path.name} [edit]) since the frozen baseline {base[:12]}: "
            + ", ".join(outside)
            + ". An improvement worker may change only the analyst's prompt, skills and tool "
            "code; an evaluator's own change (a rotation, a harness release) is declared with "
            "--freeze-baseline <its commit>."
        )
    return record | {"baseline": base, "changed": changed}
