"""The run summary's libraries (scipy, statsmodels: some 1.5 s of CPU) load in the background
once the first model request has been answered, not before it and not at the session's end,
where they were most of the time between the last answer and the exit (`docs/performance.md`,
"Beside pydantic-evals and inspect-ai")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pytest_backintel.records.summary_imports import BackgroundImports
from pytest_backintel.testing.model_server import ModelServer, Step

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "definitions" / "level1" / "l1-delivered-orders.scenario.yaml"
SQL = "SELECT COUNT(*) AS delivered_orders FROM orders WHERE order_status = 'delivered'"

WATCH = """
import json, sys
import pytest
from pytest_backintel.run.session import SESSION_KEY

SEEN = {}


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    SEEN["at_collection"] = sorted(m for m in ("scipy", "statsmodels") if m in sys.modules)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):  # before the plugin's own (trylast) computes the summary
    imports = session.config.stash[SESSION_KEY].summary_imports
    imports.join(300)
    SEEN["before_the_end"] = "statsmodels.stats.proportion" in sys.modules
    print("\\nSEEN " + json.dumps(SEEN), flush=True)
"""


def test_the_summary_libraries_load_after_the_first_answer_before_the_end(tmp_path: Path) -> None:
    (tmp_path / "watch_imports.py").write_text(WATCH)
    refs = json.loads((ROOT / "scenarios" / "references" / "olist.json").read_text())
    value = refs["references"]["l1-delivered-orders"]["values"]["delivered_orders"]
    evidence = {"id": "e1", "kind": "sql", "code": SQL, "metrics": ["delivered_orders"]}
    metric = {"name": "delivered_orders", "value": value, "unit": "orders"}
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    with ModelServer() as server:
        steps = [Step.call("run_sql", {"sql": SQL}), Step.answer([metric], [evidence])]
        server.script("`delivered_orders`", steps)
        done = subprocess.run(
            [
                *(sys.executable, "-m", "pytest", str(SCENARIO), "-q", "-p", "no:xdist"),
                *("-p", "watch_imports", "--model", "openai:bench", "--model-base-url", server.url),
                f"--results-dir={tmp_path / 'results'}",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
    seen_lines = [line for line in done.stdout.splitlines() if line.startswith("SEEN ")]
    assert done.returncode == 0, done.stdout + done.stderr
    assert seen_lines, done.stdout
    seen = json.loads(seen_lines[-1].removeprefix("SEEN "))
    assert seen["at_collection"] == [], "nothing of them before the first request"
    assert seen["before_the_end"], "imported while the run waited on its model"


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """Two importable modules no one has imported yet."""
    names = (f"summary_probe_a_{os.getpid()}", f"summary_probe_b_{os.getpid()}")
    for name in names:
        (tmp_path / f"{name}.py").write_text("VALUE = 1\n")
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    return names


def test_background_imports_wait_for_their_gate(modules: tuple[str, str]) -> None:
    gate = threading.Event()
    imports = BackgroundImports(modules, gate.wait)
    imports.join(0.2)
    assert not any(m in sys.modules for m in modules), "imported before the gate opened"
    gate.set()
    imports.join(60)
    assert all(m in sys.modules for m in modules)


def test_cancelled_background_imports_import_nothing(modules: tuple[str, str]) -> None:
    gate = threading.Event()
    imports = BackgroundImports(modules, gate.wait)
    imports.cancel()
    gate.set()
    imports.join(60)
    assert not any(m in sys.modules for m in modules)


def test_a_missing_module_is_left_for_its_user_to_report() -> None:
    imports = BackgroundImports(("no_such_module_for_backintel",))
    imports.join(60)  # no exception escapes the thread; the summary's own import raises
    assert "no_such_module_for_backintel" not in sys.modules
