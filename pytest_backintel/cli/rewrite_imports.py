"""Rewrite module paths after a move, from a map of old -> new dotted paths.

    backintel rewrite-imports [--map FILE] [--check] PATH...

Each PATH is a file or a folder (searched for .py, .md, .toml, .txt, .yaml, .yml, .cfg,
.ini, .json, .sh files, skipping .venv, .git and __pycache__). A map line is `old<TAB>new`:
a module (`stores.sqlite_probe<TAB>stores.sqlite.probe`) or, spelled with a colon, one name
that moved between modules (`stores.caps:sqlite_collect<TAB>stores.sqlite.caps:sqlite_collect`).

What is rewritten:
- `from M import a, b as c` statements of Python files, split when the names went to
  different modules; `from P import mod` where `P.mod` is a moved module;
- every other dotted mention (`import M`, `M.attr`, `"M:Class"` entry points, monkeypatch
  targets `"M.attr"`, docstrings, docs) where M is a key of the map, the longest key first;
  a mention already spelled the new way is left alone, so a second run changes nothing;
- file paths `a/b/c.py` of moved modules in any text (`stores/sqlite_probe.py`).

A name that was a module and is now a package (`stores.sqlite`, now `stores/sqlite/`) is read
as the old module: run the tool on code written before the move, and mark a line that means
the new package with a `rewrite-imports: keep` comment (a whole file: `rewrite-imports:
keep-file`).

Import order is left to `ruff check --fix --select I` afterwards. `--check` lists the files
that would change and exits 1 if there are any.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path
from typing import Any

SUFFIXES = {".py", ".md", ".toml", ".txt", ".yaml", ".yml", ".cfg", ".ini", ".json", ".sh"}
SKIP = {
    ".venv",
    ".git",
    "__pycache__",
    "node_modules",
    ".mypy_cache",
    ".ruff_cache",
    ".import_linter_cache",
    ".pytest_cache",
    ".hypothesis",
}
DEFAULT_MAP = Path(__file__).with_name("renames.tsv")
KEEP = "rewrite-imports: keep"
"""A line holding this (in a comment) is left as it is: a name that is already new."""
KEEP_FILE = "rewrite-imports: keep-file"
"""A file holding this is left whole (one that shows the old names on purpose)."""


def load_map(path: Path) -> tuple[dict[str, str], set[str]]:
    """old -> new (dotted), from `old<TAB>new` lines (`#` comments and blank lines skipped),
    and the keys that are names in a module rather than modules."""
    renames: dict[str, str] = {}
    symbols: set[str] = set()
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not all(parts):
            raise SystemExit(f"{path}:{n}: expected `old<TAB>new`, got {line!r}")
        old, new = (p.strip() for p in parts)
        if (":" in old) != (":" in new):
            raise SystemExit(f"{path}:{n}: a moved name has a colon on both sides: {line!r}")
        if ":" in old:
            old, new = old.replace(":", "."), new.replace(":", ".")
            symbols.add(old)
        renames[old] = new
    return renames, symbols


class Rewriter:
    """Applies one map to texts."""

    def __init__(self, renames: dict[str, str], symbols: set[str]) -> None:
        self.renames = renames
        modules = set(renames) - symbols
        self.new_names = set(renames.values())
        self.new_prefixes = {v.rsplit(".", i)[0] for v in self.new_names for i in range(3)}
        keys = sorted(renames, key=len, reverse=True)
        self.dotted = re.compile(
            r"(?<![\w.])(" + "|".join(re.escape(k) for k in keys) + r")(?=([.:]\w+)?)(?!\w)"
        )
        self.paths = {k.replace(".", "/") + ".py": _path_of(renames[k]) for k in modules}
        self.path_re = re.compile(
            r"(?<![\w/])("
            + "|".join(re.escape(p) for p in sorted(self.paths, key=len)[::-1])
            + r")"
        )

    def text(self, text: str, python: bool) -> str:
        skip: set[int] = set()
        if python:
            text = self._imports(text)
            skip = _from_lines(text)
        lines = text.splitlines(keepends=True)
        return "".join(
            line if KEEP in line else self._line(line, dotted=n not in skip)
            for n, line in enumerate(lines, 1)
        )

    def _line(self, line: str, dotted: bool) -> str:
        if dotted:
            line = self.dotted.sub(self._dotted, line)
        return self.path_re.sub(lambda m: self.paths[m.group(1)], line)

    def _dotted(self, m: re.Match[str]) -> str:
        old, tail = m.group(1), m.group(2) or ""
        if tail:
            name = tail[1:]
            moved = self.renames.get(f"{old}.{name}")
            if moved is not None:  # a name of the old module that now lives elsewhere
                return moved.rsplit(".", 1)[0]
            if f"{old}.{name}" in self.new_prefixes and tail[0] == ".":
                return old  # already the new spelling (`stores.sqlite.store`)
        return self.renames[old]

    def _imports(self, text: str) -> str:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return text
        lines = text.splitlines(keepends=True)
        edits: list[tuple[int, int, str]] = []
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            new = self._from_import(node)
            if new is not None:
                edits.append((node.lineno, node.end_lineno or node.lineno, new))
        for start, end, new in sorted(edits, reverse=True):
            first = lines[start - 1]
            indent = first[: len(first) - len(first.lstrip())]
            lines[start - 1 : end] = [indent + s + "\n" for s in new.split("\n")]
        return "".join(lines)

    def _from_import(self, node: ast.ImportFrom) -> str | None:
        module = node.module or ""
        groups: dict[str, list[str]] = {}
        changed = False
        for alias in node.names:
            as_name = alias.asname or alias.name
            full = f"{module}.{alias.name}"
            target = self.renames.get(full)
            if target is not None:
                where, name = target.rsplit(".", 1)
                changed = True
            elif module in self.renames and full not in self.new_prefixes:
                where, name = self.renames[module], alias.name
                changed = True
            else:
                where, name = module, alias.name
            spelled = name if as_name == name else f"{name} as {as_name}"
            groups.setdefault(where, []).append(spelled)
        if not changed:
            return None
        out = []
        for where, names in groups.items():
            line = f"from {where} import {', '.join(names)}"
            if len(line) > 99:
                line = f"from {where} import (\n" + "".join(f"    {n},\n" for n in names) + ")"
            out.append(line)
        return "\n".join(out)


def _from_lines(text: str) -> set[int]:
    """The line numbers of `from ... import` statements (rewritten whole by `_imports`)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    return {
        n
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and not node.level
        for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
    }


def _path_of(module: str) -> str:
    return module.replace(".", "/") + ".py"


def files_under(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        if path.is_file():
            found.append(path)
            continue
        for sub in sorted(path.rglob("*")):
            if sub.is_file() and sub.suffix in SUFFIXES and not SKIP & set(sub.parts):
                found.append(sub)
    return found


def register(sub: Any) -> None:
    """`backintel rewrite-imports`: move code written against old module paths."""
    p = sub.add_parser(
        "rewrite-imports",
        help="rewrite imports and paths of modules this release moved (see docs/stores.md)",
        description=(__doc__ or "").split("\n\n")[0],
    )
    p.add_argument("paths", nargs="+", type=Path, help="files or folders to rewrite")
    p.add_argument("--map", type=Path, default=DEFAULT_MAP, help="old<TAB>new lines")
    p.add_argument("--check", action="store_true", help="list, do not write (exit 1 if any)")
    p.set_defaults(func=rewrite_command)


def rewrite_command(args: argparse.Namespace) -> int:
    rewriter = Rewriter(*load_map(args.map))
    changed = []
    for path in files_under(args.paths):
        try:
            before = path.read_text()
        except UnicodeDecodeError:
            continue
        if KEEP_FILE in before:
            continue
        after = rewriter.text(before, python=path.suffix == ".py")
        if after != before:
            changed.append(path)
            if not args.check:
                path.write_text(after)
    for path in changed:
        print(path)
    return 1 if args.check and changed else 0
