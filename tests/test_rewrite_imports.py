"""`backintel rewrite-imports` moves code written against the flat `stores/` (and the old
scenario and evidence modules) to the package-per-backend layout, from the map beside
`pytest_backintel/cli/rewrite_imports.py`.

This file shows the old names on purpose (rewrite-imports: keep-file)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_backintel.cli import rewrite_imports

ROOT = Path(__file__).resolve().parent.parent
TOOL = [str(Path(sys.executable).parent / "backintel"), "rewrite-imports"]

OLD = """\
from stores import clickhouse_policy as policy
from stores.caps import ResultCollector, sqlite_collect
from stores.pg_conn import ident, redact
from stores.sqlite import SQLiteStore
import stores.engine_process


def test_it(monkeypatch):
    monkeypatch.setattr("stores.sqlite_probe.keep", lambda *a: 1)
    return "stores.duckdb_store:DuckDBStore", stores.engine_process.IsolatedSession
"""
NEW = """\
from stores.clickhouse import policy
from stores.common.caps import ResultCollector
from stores.sqlite.caps import sqlite_collect
from stores.postgres.conn import ident
from stores.common.dsn import redact
from stores.sqlite.store import SQLiteStore
import stores.engine.process


def test_it(monkeypatch):
    monkeypatch.setattr("stores.sqlite.probe.keep", lambda *a: 1)
    return "stores.duckdb.store:DuckDBStore", stores.engine.process.IsolatedSession
"""


def _map() -> tuple[dict[str, str], set[str]]:
    return rewrite_imports.load_map(rewrite_imports.DEFAULT_MAP)


def test_old_imports_strings_and_paths_are_rewritten_once(tmp_path: Path) -> None:
    code = tmp_path / "pkg" / "test_old.py"
    code.parent.mkdir()
    code.write_text(OLD)
    doc = tmp_path / "notes.md"
    doc.write_text("see `stores/pg_sweep.py` and `stores.sqlite_probe.TablePlan`\n")
    out = subprocess.run([*TOOL, str(tmp_path)], capture_output=True, text=True, check=True)
    assert sorted(out.stdout.split()) == sorted([str(code), str(doc)])
    assert code.read_text() == NEW
    assert doc.read_text() == "see `stores/postgres/sweep.py` and `stores.probe.TablePlan`\n"
    again = subprocess.run([*TOOL, "--check", str(tmp_path)], capture_output=True, text=True)
    assert again.returncode == 0, again.stdout  # a second run changes nothing


def test_check_lists_what_would_change_and_fails(tmp_path: Path) -> None:
    (tmp_path / "old.py").write_text("from stores.pg_conn import ident\n")
    done = subprocess.run([*TOOL, "--check", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stdout.strip() == str(tmp_path / "old.py")
    assert (tmp_path / "old.py").read_text() == "from stores.pg_conn import ident\n"


def test_a_line_marked_keep_is_left_alone() -> None:
    rewriter = rewrite_imports.Rewriter(*_map())
    kept = 'BACKENDS = ["stores.sqlite"]  # rewrite-imports: keep\n'
    assert rewriter.text(kept, python=True) == kept
    assert rewriter.text('X = ["stores.sqlite"]\n', python=True) == 'X = ["stores.sqlite.store"]\n'


def test_a_malformed_map_line_names_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "renames.tsv"
    bad.write_text("stores.a\tstores.b\nstores.c stores.d\n")
    with pytest.raises(SystemExit, match=r"renames.tsv:2: expected `old<TAB>new`"):
        rewrite_imports.load_map(bad)


def test_every_new_path_of_the_map_imports_and_no_old_module_is_left() -> None:
    renames, symbols = _map()
    for old, new in sorted(renames.items()):
        if old in symbols:
            module, _, name = new.rpartition(".")
            assert hasattr(importlib.import_module(module), name), new
            continue
        importlib.import_module(new)
        assert not (ROOT / (old.replace(".", "/") + ".py")).exists(), f"{old} is still there"


def test_code_of_the_last_release_fails_to_import_then_runs_after_the_rewrite(
    tmp_path: Path,
) -> None:
    """`build_from_parquet` moved from `stores.common.sqlite_file` to `stores.engine.sqlite_copy`
    in this release: a store written against the last one stops at the import, and the one
    command the docs give moves it."""
    code = tmp_path / "mine.py"
    code.write_text(
        "from stores.common.sqlite_file import build_from_parquet, quote_ident\n"
        "BUILD, QUOTE = build_from_parquet, quote_ident\n"
    )
    run = [sys.executable, "-c", "import mine; print(mine.BUILD.__module__)"]
    before = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True)
    assert before.returncode == 1
    assert "cannot import name 'build_from_parquet'" in before.stderr
    subprocess.run([*TOOL, str(code)], capture_output=True, text=True, check=True)
    assert code.read_text().splitlines()[:2] == [
        "from stores.engine.sqlite_copy import build_from_parquet",
        "from stores.common.sqlite_file import quote_ident",
    ]
    after = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, check=True)
    assert after.stdout.strip() == "stores.engine.sqlite_copy"
