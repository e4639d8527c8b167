"""docs/stores.md's third-party store package (`examples/store_package`), run as the docs show
it, and the conformance suite's deviation rules on copies of it: a declared deviation must fail
with exactly the exception it names, and a failure no deviation declares fails the suite."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stores.conformance import NoHook, deviation

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "store_package"
COMMAND = "uv run pytest examples/store_package -p no:xdist"


def pytest_in(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(folder), "-p", "no:xdist", "-q", "-rfxX", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def copy_with(tmp_path: Path, old: str, new: str) -> Path:
    """The example package with one edit to its test module."""
    folder = tmp_path / "store_package"
    shutil.copytree(EXAMPLE, folder)
    module = folder / "test_conformance.py"
    text = module.read_text()
    assert old in text
    module.write_text(text.replace(old, new))
    return folder


def test_the_docs_show_the_example_command() -> None:
    assert f"$ {COMMAND}" in (ROOT / "docs" / "stores.md").read_text()


def test_the_example_package_passes_with_its_two_deviations() -> None:
    done = pytest_in(EXAMPLE)
    assert done.returncode == 0, done.stdout[-3000:]
    assert re.search(r"^\d+ passed, 2 xfailed in ", done.stdout, re.MULTILINE), done.stdout
    assert "XFAIL" in done.stdout
    assert "notimpl on readonly-sqlite: this store serves no perturbed probe" in done.stdout


def test_a_deviation_raising_another_exception_fails(tmp_path: Path) -> None:
    folder = copy_with(tmp_path, "raises=NoHook,", "raises=KeyError,")
    done = pytest_in(folder, "-k", "probe")
    assert done.returncode == 1
    assert "1 failed" in done.stdout, done.stdout[-3000:]


def test_a_deviation_on_a_check_that_passes_fails(tmp_path: Path) -> None:
    folder = copy_with(tmp_path, '"test_probe_moves_every_table"', '"test_row_cap_and_truncation"')
    done = pytest_in(folder, "-k", "row_cap")
    assert done.returncode == 1
    assert "[XPASS(strict)]" in done.stdout, done.stdout[-3000:]


PROBE_DEVIATION = """            deviation(
                "test_probe_moves_every_table",
                reason="this store serves no perturbed probe of an item",
                raises=NoHook,
                kind="notimpl",
            ),
"""


def test_an_undeclared_failure_fails(tmp_path: Path) -> None:
    folder = copy_with(tmp_path, PROBE_DEVIATION, "")
    done = pytest_in(folder, "-k", "probe")
    assert done.returncode == 1
    assert "NoHook: the store's items have no probe(salt)" in done.stdout, done.stdout[-3000:]


def test_a_deviation_on_no_check_of_the_module_is_a_usage_error(tmp_path: Path) -> None:
    folder = copy_with(tmp_path, '"test_probe_moves_every_table"', '"test_probe_moves_every_tabel"')
    done = pytest_in(folder)
    assert done.returncode != 0
    assert "test_probe_moves_every_tabel" in done.stdout + done.stderr


def test_a_deviation_needs_a_reason_and_an_exception() -> None:
    with pytest.raises(ValueError, match="reason is mandatory"):
        deviation("test_type_round_trips", reason=" ", raises=NoHook)
    with pytest.raises(ValueError, match="raises= must name"):
        deviation("test_type_round_trips", reason="why", raises="NoHook")  # type: ignore[arg-type]
    kept = deviation("test_type_round_trips", reason="why", raises=(NoHook, KeyError))
    assert kept.raises == (NoHook, KeyError)
