"""Install hygiene: a user's own top-level package must not silently replace one of ours.

The distribution installs the top-level packages `analyst`, `scenarios`, `stores` and `reports`
beside `pytest_backintel`. A folder of the same name with an `__init__.py` (or a module of that
name) earlier on `sys.path`, as a repository root on `pythonpath` puts it, would be imported
instead; `shadowed_packages` finds such folders so the plugin can say which one to rename.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["PACKAGES", "shadowed_packages"]

PACKAGES = ("analyst", "scenarios", "stores", "reports")
INSTALLED = Path(__file__).resolve().parents[2]


def _location(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    origin = Path(spec.origin)
    return origin.parent if origin.name == "__init__.py" else origin


def shadowed_packages(installed: Path = INSTALLED) -> list[str]:
    """One message per installed package that Python would import from somewhere else."""
    problems = []
    for name in PACKAGES:
        where = _location(name)
        if where is not None and where.resolve() != (installed / name).resolve():
            problems.append(
                f"{where} shadows the package {name!r} that backintel-bench installs "
                f"({installed / name}): rename your {where.name!r} (for example to "
                f"'my_{name}') or take its folder off pythonpath"
            )
    return problems
