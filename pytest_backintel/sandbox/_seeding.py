"""Shipped into every sandbox as `sitecustomize` (standard library only): seeds `random` and
NumPy's global generator with `$BACKINTEL_SEED` as soon as a program imports them, so an
unseeded program draws the same numbers in every run (`pytest_backintel.sandbox.seed`).

Nothing is imported up front (NumPy stays unloaded for a program that never uses it): a finder
on `sys.meta_path` wraps the loaders of `random` and `numpy.random` and seeds each right after
it is executed. The classes only quack as a loader and a finder: importing `importlib.abc`
would pull in pathlib, tempfile and re, 90 ms of every sandboxed interpreter's start.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from importlib.abc import Loader


class _Seeded:
    """A module's own loader, then `module.seed(seed)`."""

    def __init__(self, loader: Any, seed: int) -> None:
        self._loader = loader
        self._seed = seed

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        module.seed(self._seed)

    def __getattr__(self, name: str) -> Any:  # resources, get_filename, is_package, ...
        return getattr(self._loader, name)


class _SeedOnImport:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.pending = {"random", "numpy.random"}

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.pending:
            return None
        self.pending.discard(fullname)
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = cast("Loader", _Seeded(spec.loader, self.seed))
                return spec
        return None


def _install() -> None:
    raw = os.environ.get("BACKINTEL_SEED", "")
    if not raw.isdigit():
        return
    seed = int(raw)
    if "random" in sys.modules:  # imported during start-up: seed it now
        sys.modules["random"].seed(seed)
    sys.meta_path.insert(0, _SeedOnImport(seed))


_install()
