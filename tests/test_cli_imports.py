"""The `backintel` command answers at once: parsing any subcommand's arguments imports none of
the heavy libraries (pyarrow, polars, numpy, DuckDB, Pydantic AI, pytest, pydantic); each
subcommand's handler imports what it needs when it runs. Nor does a pytest process load what a
model's first request does not need: the plugin no array library, the SQLite store no DuckDB,
the session's start no backend's sweeper when nothing is stale, a session of scenarios not
Hypothesis (whose plugin would import it at the end)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

HEAVY = (
    "pyarrow",
    "polars",
    "numpy",
    "duckdb",
    "pydantic_ai",
    "pytest",
    "pydantic",
    "mcp",
    "uvicorn",
    "scipy",
    "statsmodels",
    "sqlalchemy",
)

PROBE = """
import json, sys
from pytest_backintel.cli import build_parser
build_parser().parse_args(json.loads(sys.argv[1]))
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["score", "--case", "l1-item-grain", "answer.json"],
        ["score", "--run", "results/x"],
        ["validate", "scenarios"],
        ["compare", "results/a", "results/b"],
        ["view", "results/a"],
        ["report", "results/a"],
        ["clean", "--dry-run"],
        ["merge", "results/a", "results/b"],
        ["score", "--answers", "answers.jsonl"],
    ],
    ids=lambda argv: "-".join(a for a in argv if not a.startswith(("results", "answer"))),
)
def test_parsing_a_subcommand_imports_no_heavy_library(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), json.dumps(argv)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout) == []


def test_the_probe_sees_a_heavy_import_when_there_is_one() -> None:
    """The check above can fail: importing the plugin loads pytest and pydantic."""
    code = PROBE.replace(
        "from pytest_backintel.cli", "import pytest_backintel.plugin\nfrom pytest_backintel.cli"
    )
    done = subprocess.run(
        [sys.executable, "-c", code.format(heavy=HEAVY), json.dumps(["validate"])],
        capture_output=True,
        text=True,
        check=True,
    )
    assert {"pytest", "pydantic"} <= set(json.loads(done.stdout))


def test_a_pytest_run_here_loads_no_langsmith() -> None:
    """The project's addopts keep langsmith's pytest plugin (which the `examples` group's
    LangChain agent installs) out of every pytest process: 1.3 s of CPU before collection."""
    probe = (
        "import sys, pytest; pytest.main(['--collect-only', '-q', '-p', 'no:xdist', "
        "'-p', 'no:randomly', 'scenarios/definitions/level1/l1-delivered-orders.scenario.yaml']);"
        "print(sorted(m for m in ('langsmith',) if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.splitlines()[-1] == "[]", done.stdout


def test_loading_the_plugin_imports_no_array_library() -> None:
    """pytest loads the plugin in every process (and xdist worker) before the first item:
    numpy and pyarrow come with the first store or interval that needs them, not here."""
    code = (
        "import sys, pytest_backintel.plugin\n"
        "print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code.format(heavy=("numpy", "pyarrow", "polars", "duckdb"))],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "[]", done.stdout


def _imported(code: str, names: tuple[str, ...], env: dict[str, str] | None = None) -> list[str]:
    """Which of `names` are in `sys.modules` after `code` ran in a fresh interpreter."""
    seen = f"sorted(m for m in {names!r} if m in sys.modules)"
    probe = f"{code}\nimport json, sys\nprint(json.dumps({seen}))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
    )
    return list(json.loads(done.stdout))


def test_the_sqlite_store_imports_duckdb_only_to_build_from_parquet() -> None:
    """A dataset that ships its SQLite file is provisioned without DuckDB, whose import
    (some 40 ms) would otherwise come before the first trial's model request."""
    assert _imported("import stores.sqlite.store", ("duckdb",)) == []
    built = "import stores.sqlite.build as b\nassert b.build_from_parquet.__name__"
    assert _imported(built, ("duckdb",)) == ["duckdb"]


def test_a_session_start_with_nothing_stale_loads_no_sweeper(tmp_path: Path) -> None:
    """The sweepers (an entry-point scan, ClickHouse's HTTP client) load only when a folder a
    gone process left is there to sweep."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # no other run's `backintel-sbx-*`
    sweepers = ("stores.postgres.sweep", "stores.clickhouse.dsn")
    code = (
        "from pathlib import Path\nfrom pytest_backintel.run.cleanup import clean_stale\n"
        f"clean_stale(Path({str(tmp_path / 'data')!r}), postgres=False)"
    )
    assert _imported(code, sweepers, env) == []
    (tmp_path / "data" / "sandbox" / "999999999").mkdir(parents=True)  # no such process
    assert _imported(code, sweepers, env) == sorted(sweepers)
    assert not (tmp_path / "data" / "sandbox" / "999999999").exists()


HYPOTHESIS_PROBE = """
import json, sys
import pytest

seen = {}


class Probe:
    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, config):
        seen["plugin"] = config.pluginmanager.get_plugin("hypothesispytest") is not None


pytest.main(["--collect-only", "-q", "-p", "no:xdist", *json.loads(sys.argv[1])], plugins=[Probe()])
print(json.dumps({"plugin": seen.get("plugin"), "imported": "hypothesis" in sys.modules}))
"""


@pytest.mark.parametrize("with_given", [False, True], ids=["scenario-only", "with-a-given-test"])
def test_hypothesis_is_imported_only_by_a_session_that_uses_it(
    tmp_path: Path, with_given: bool
) -> None:
    """Hypothesis's plugin imports Hypothesis in its terminal summary (1 to 2 s of CPU) even
    when no test used it: a session of scenarios unregisters it; one that collected a
    `@given` test keeps it."""
    given = tmp_path / "test_given.py"
    given.write_text(
        "from hypothesis import given, strategies\n\n\n"
        "@given(strategies.integers())\ndef test_int(x):\n    pass\n"
    )
    paths = ["scenarios/definitions/level1/l1-delivered-orders.scenario.yaml"]
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            HYPOTHESIS_PROBE,
            json.dumps([*paths, *([str(given)] if with_given else [])]),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen == {"plugin": with_given, "imported": with_given}, done.stdout


def test_a_test_suites_session_imports_no_summary_library(tmp_path: Path) -> None:
    """The run summary's libraries (scipy, statsmodels) are imported in the background only by
    a session with benchmark items: in a test suite's session the import would land in the
    middle of whatever test runs then, and a `pytester` test restores `sys.modules` after
    itself, so numpy's C modules imported meanwhile could never load again in that process."""
    (tmp_path / "test_plain.py").write_text(
        "import time\n\n\ndef test_one():\n    pass\n\n\ndef test_two():\n    time.sleep(1)\n"
    )
    probe = (
        "import json, sys, pytest\n"
        f"pytest.main(['-q', '-p', 'no:xdist', {str(tmp_path / 'test_plain.py')!r}])\n"
        "print(json.dumps(sorted(m for m in ('scipy', 'statsmodels') if m in sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert json.loads(done.stdout.splitlines()[-1]) == [], done.stdout
