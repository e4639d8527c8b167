"""The scientific stack's bytecode, written once on the host, where the sandbox cannot.

A sandboxed program reads site-packages read-only with `PYTHONDONTWRITEBYTECODE=1`, so every
module it imports that has no `.pyc` is compiled again by every sandboxed process. `uv sync`
compiles nothing unless told to, and the harness itself never imports scikit-learn, pandas or
SciPy, so on a fresh install every Python evidence run compiled them from source (about 4 s of
CPU a process on a 2-core machine, against 1.7 s with bytecode). `warm_in_background()` imports
them once in a host process that may write bytecode, when scikit-learn's is missing.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
from pathlib import Path

__all__ = ["STACK", "needs_warming", "warm", "warm_in_background"]

STACK = (
    "numpy",
    "pandas",
    "scipy.stats",
    "sklearn.ensemble",
    "sklearn.linear_model",
    "sklearn.metrics",
    "sklearn.model_selection",
    "sklearn.pipeline",
    "sklearn.preprocessing",
)
"""What analysts' Python evidence imports most (the shipped prediction programs among them)."""


def needs_warming(package: str = "sklearn") -> bool:
    """True when `package` is installed, writable and has no bytecode for its `__init__`."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return False
    cached = Path(importlib.util.cache_from_source(spec.origin))
    return not cached.exists() and os.access(Path(spec.origin).parent, os.W_OK)


def warm(modules: tuple[str, ...] = STACK) -> None:
    """Import `modules` (those installed) in a host process that writes their bytecode."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    code = "".join(f"\ntry:\n    import {name}\nexcept Exception:\n    pass" for name in modules)
    subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=False)


def warm_in_background() -> threading.Thread | None:
    """Write the stack's bytecode in a host process in the background, if it is missing."""
    if not needs_warming():
        return None
    thread = threading.Thread(target=warm, name="backintel-bytecode", daemon=True)
    thread.start()
    return thread
