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


BACKENDS = ("sqlite", "duckdb", "postgres", "clickhouse", "iceberg", "files", "multi", "sqlalchemy")
"""The backend packages under `stores/` (issue 38): each holds all one backend is."""
BACKEND_PREFIXES = ("sqlite", "duckdb", "postgres", "pg", "clickhouse", "ch", "iceberg", "lake")
MAX_LINES = 400
SPLIT_LATER: dict[str, str] = {}
"""Modules still over `MAX_LINES`, each with why; the test fails (strict xfail) once one is
split, so the entry goes with it."""


def _backend_packages() -> set[str]:
    return {p.name for p in (ROOT / "stores").iterdir() if p.is_dir() and p.name in BACKENDS}


def test_stores_top_level_holds_the_shared_things_and_one_package_per_backend() -> None:
    entries = {p.name for p in (ROOT / "stores").iterdir()} - {"__pycache__"}
    assert _backend_packages() == set(BACKENDS)
    shared = entries - set(BACKENDS)
    assert len(shared) <= 10, sorted(shared)
    for name in BACKENDS:
        init = ROOT / "stores" / name / "__init__.py"
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init} says what it holds"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_backend_package_names_its_modules_without_the_backend(backend: str) -> None:
    """`stores/postgres/probe.py`, not `stores/postgres/pg_probe.py`."""
    names = [p.stem for p in (ROOT / "stores" / backend).glob("*.py")]
    prefixed = [
        n for n in names if n.lstrip("_").startswith(tuple(f"{b}_" for b in BACKEND_PREFIXES))
    ]
    assert prefixed == []


def _named_after_a_backend(path: Path) -> bool:
    words = re.split(r"[_.]", path.stem.lower())
    return any(w in BACKEND_PREFIXES or w in BACKENDS for w in words)


def test_the_harness_has_no_module_named_after_a_backend() -> None:
    """A backend's pieces live in its package under `stores/`; the harness asks the store."""
    named = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "pytest_backintel").rglob("*"))
        if (p.suffix == ".py" or p.is_dir()) and _named_after_a_backend(p)
    ]
    assert named == []


def test_the_name_check_finds_one() -> None:
    assert _named_after_a_backend(Path("pytest_backintel", "evidence", "perturb_views_pg.py"))
    assert _named_after_a_backend(Path("pytest_backintel", "evidence", "dialect_clickhouse.py"))
    assert not _named_after_a_backend(Path("pytest_backintel/evidence/dialects.py"))


def _long_modules() -> list[object]:
    params: list[object] = []
    for package in ("stores", "pytest_backintel", "scenarios"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            marks = []
            if rel in SPLIT_LATER:
                marks = [pytest.mark.xfail(reason=SPLIT_LATER[rel], strict=True)]
            params.append(pytest.param(rel, id=rel, marks=marks))
    return params


@pytest.mark.parametrize("module", _long_modules())
def test_no_module_is_over_400_lines(module: str) -> None:
    lines = len((ROOT / module).read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines: split it by concern"
