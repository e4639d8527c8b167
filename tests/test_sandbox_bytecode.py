"""The scientific stack's bytecode is written once on the host when it is missing, since a
sandbox reads site-packages read-only and would compile it again in every process."""

import importlib
import sys
from pathlib import Path

import pytest

from pytest_backintel.sandbox.bytecode import needs_warming, warm


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An uncompiled package `bi_warm_pkg` with a submodule, importable here and in children."""
    root = tmp_path / "site"
    (root / "bi_warm_pkg").mkdir(parents=True)
    (root / "bi_warm_pkg" / "__init__.py").write_text("VALUE = 1\n")
    (root / "bi_warm_pkg" / "sub.py").write_text("from bi_warm_pkg import VALUE\n")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", str(root))
    importlib.invalidate_caches()
    return root / "bi_warm_pkg"


def test_a_package_without_bytecode_is_warmed_once(package: Path) -> None:
    assert needs_warming("bi_warm_pkg")
    warm(("bi_warm_pkg.sub", "bi_not_installed"))  # a missing one is passed over
    cached = sorted(p.name for p in (package / "__pycache__").iterdir())
    tag = sys.implementation.cache_tag
    assert cached == [f"__init__.{tag}.pyc", f"sub.{tag}.pyc"]
    assert not needs_warming("bi_warm_pkg")


def test_nothing_to_warm_for_a_package_not_installed() -> None:
    assert not needs_warming("bi_not_installed")
