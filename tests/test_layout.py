"""The layout shows the architecture (issue 22): a few modules at the harness's top, one
subpackage per stage, no module taking another's private names, and every public import path
that the README and docs show still importable."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pytest_backintel", "analyst", "scenarios", "stores", "reports")
TOP_LEVEL = {
    "__init__.py",
    "plugin.py",
    "options.py",
    "contract.py",
    "analyst_api.py",
    "scenario.py",
    "outcomes.py",
    "tolerance.py",
}
STAGES = {"collect", "run", "evidence", "scoring", "records", "freeze", "cli", "sandbox", "testing"}


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_harness_top_holds_hooks_options_and_public_modules_only() -> None:
    top = {p.name for p in (ROOT / "pytest_backintel").glob("*.py")}
    assert top == TOP_LEVEL
    assert len(top) <= 8
    folders = {p.name for p in (ROOT / "pytest_backintel").iterdir() if p.is_dir()}
    assert folders - {"__pycache__"} == STAGES
    for stage in STAGES:
        init = ROOT / "pytest_backintel" / stage / "__init__.py"
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init} says what the room holds"


def _private_imports(path: Path) -> list[str]:
    """`from X import _name` where X is another module than the one `_name` belongs to."""
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                name = alias.name
                if name.startswith("_") and not name.startswith("__"):
                    submodule = f"{node.module}.{name}"
                    own = node.module == package or submodule.startswith(package + ".")
                    if not (own and (ROOT / (submodule.replace(".", "/") + ".py")).exists()):
                        found.append(f"{me}:{node.lineno} imports {node.module}.{name}")
    return found


def test_no_module_takes_another_modules_private_names() -> None:
    found = [line for path in _modules() for line in _private_imports(path)]
    assert found == []


def test_the_private_name_check_finds_one(tmp_path: Path) -> None:
    """The check above can fail: a module that takes `_cents` from a sibling is reported."""
    fake = ROOT / "scenarios" / "_layout_probe_tmp.py"
    fake.write_text("from scenarios.olist.oracles import _cents\n")
    try:
        assert _private_imports(fake) == [
            "scenarios._layout_probe_tmp:1 imports scenarios.olist.oracles._cents"
        ]
    finally:
        fake.unlink()


PROSE = {"analyst.kind"}
"""Dotted words in the docs that are not import paths (the `kind` an analyst declares)."""
PUBLIC_PATH = re.compile(r"\b((?:pytest_backintel|analyst|stores|reports|scenarios)(?:\.\w+)+)\b")


def _documented_paths() -> list[str]:
    paths: set[str] = set()
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for match in PUBLIC_PATH.finditer(doc.read_text(encoding="utf-8")):
            text = match.group(1)
            if text in PROSE or text.endswith((".py", ".json", ".md", ".yaml", ".toml", ".j2")):
                continue
            paths.add(text)
    return sorted(paths)


@pytest.mark.parametrize("dotted", _documented_paths())
def test_every_documented_import_path_imports(dotted: str) -> None:
    """A module path or `module.attribute` the README or docs name resolves as written."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return
    pytest.fail(f"{dotted} does not import")
