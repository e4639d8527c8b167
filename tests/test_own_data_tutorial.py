"""docs/own-data.md, executed: the project is built from the tutorial's own code blocks in an
empty folder and every command it shows is run there with the installed plugin."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

DOC = Path(__file__).resolve().parents[1] / "docs" / "own-data.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
BIN = Path(sys.executable).parent

UNANSWERABLE = {"gross-margin", "customer-age"}
ANSWERABLE = {"delivered-orders", "delivered-revenue", "canceled-share"}


def tutorial() -> tuple[dict[str, str], list[str]]:
    """The tutorial's files (blocks with `file=PATH`, or `append=PATH` to add to one) and its
    commands (`console` blocks)."""
    files: dict[str, str] = {}
    commands: list[str] = []
    for lang, info, body in FENCE.findall(DOC.read_text()):
        name = re.search(r"(file|append)=(\S+)", info)
        if name:
            path = name.group(2)
            files[path] = (files.get(path, "") if name.group(1) == "append" else "") + body
        elif lang == "console":
            commands += [line[2:] for line in body.splitlines() if line.startswith("$ ")]
    return files, commands


def run(folder: Path, command: str) -> subprocess.CompletedProcess[str]:
    """A tutorial command as a user runs it (`uv run X` is X from this environment)."""
    argv = command.split()
    assert argv[:2] == ["uv", "run"], command
    tool = argv[2]
    exe = sys.executable if tool == "python" else str(BIN / tool)
    env = {k: v for k, v in os.environ.items() if k != "BACKINTEL_DATA_DIR"}  # as a user has it
    return subprocess.run(
        [exe, *argv[3:]], cwd=folder, env=env, capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip


def outcomes(folder: Path, run_id: str) -> dict[str, str]:
    lines = (folder / "results" / run_id / "records.jsonl").read_text().splitlines()
    return {r["scenario_id"]: r["outcome"] for r in map(json.loads, lines)}


MARIADB = "mysql+pymysql://root@127.0.0.1:3306/shop_bench"
"""The tutorial's MariaDB binding (the machine's server, as CI starts it)."""
EXPECTED_CODES = [
    ("uv run python make_shop.py", 0),
    ("uv run backintel validate scenarios", 1),
    ("uv run backintel references build", 0),
    ("uv run backintel validate scenarios", 0),
    ("uv run pytest scenarios --run-id reference", 0),
    ("uv run pytest scenarios --analyst refuse-all --run-id refuse-all", 1),
    ("uv run pytest scenarios --analyst perturbed --run-id perturbed", 1),
    ("uv run pytest scenarios --analyst my_agent:keyword_analyst --run-id mine", 1),
    ("uv run backintel score --run results/mine", 1),
    ("uv run backintel score --answers answers.jsonl --out scored.jsonl", 1),
    ("uv run backintel report results/mine", 0),
    ("uv run backintel compare results/reference results/mine", 1),
    ("uv run pytest scenarios --analyst my_agent:keyword_analyst_v2 --run-id mine-v2", 1),
    ("uv run backintel compare results/mine results/mine-v2", 0),
    ("uv run backintel references build", 0),
    ("uv run backintel validate suites", 0),
    ("uv run pytest suites --run-id suite", 0),
    ("uv run python export_parquet.py", 0),
    ("uv run backintel references build --dataset shop=parquet:exports", 0),
    ("uv run backintel validate suites --dataset shop=parquet:exports", 0),
    ("uv run pytest suites --dataset shop=parquet:exports --run-id suite-parquet", 0),
    ("uv run backintel compare results/suite results/suite-parquet --across-bindings", 0),
    ("uv run backintel score --run results/suite-parquet", 0),
    ("uv run python export_mariadb.py", 0),
    (f"uv run backintel references build --dataset shop=sqlalchemy:{MARIADB}", 0),
    (f"uv run pytest suites --dataset shop=sqlalchemy:{MARIADB} --run-id suite-mariadb", 0),
    ("uv run backintel compare results/suite results/suite-mariadb --across-bindings", 0),
    ("uv run backintel schema --out scenario.schema.json", 0),
]
SUITE = {"german-customers", "top-country", "revenue-by-country", "order-span"}
SAID = {
    "uv run backintel score --run results/mine": [
        "5 recorded answers scored again: 5 agree with the trial; 1 pass, 4 fail"
    ],
    "uv run backintel score --answers answers.jsonl --out scored.jsonl": [
        "answers.jsonl:1: delivered-orders: pass",
        "answers.jsonl:2: delivered-revenue: wrong_value (delivered_revenue: expected 126.0, got *",
        "2 answers: 1 pass, 1 fail, 0 not scored",
    ],
    "uv run backintel compare results/reference results/mine": [
        "suite scenarios: WORSE",
        "VERDICT: worse",
    ],
    "uv run backintel compare results/mine results/mine-v2": [
        "suite scenarios: NO DETECTABLE DIFFERENCE",
        "  smallest detectable difference: * (80% power, alpha 0.05)",
        "    delivered-revenue  fixed      false_refusal -> pass",
        "  note: every case that changed was fixed (1), but the difference is not *",
        "VERDICT: no detectable difference",
    ],
    "uv run backintel compare results/suite results/suite-parquet --across-bindings": [
        "scenario hash * matches; paired across bindings on purpose",
        "  data hash of world 'shop' differs: baseline *, candidate *",
        "suite shop: NO DETECTABLE DIFFERENCE",
        "  policy: alpha 0.05; controls german-customers (suite file)",
        "VERDICT: no detectable difference",
    ],
    "uv run pytest suites --dataset shop=parquet:exports --run-id suite-parquet": [
        "backintel: dataset shop: parquet exports on store lake-parquet"
    ],
    f"uv run pytest suites --dataset shop=sqlalchemy:{MARIADB} --run-id suite-mariadb": [
        "backintel: dataset shop: sqlalchemy * on store sqlalchemy"
    ],
    "uv run backintel compare results/suite results/suite-mariadb --across-bindings": [
        "suite shop: NO DETECTABLE DIFFERENCE",
        "VERDICT: no detectable difference",
    ],
    "uv run backintel score --run results/suite-parquet": [
        "4 recorded answers scored again: 4 agree with the trial; 4 pass, 0 fail"
    ],
}
"""What a command prints (stdout lines, fnmatch patterns in order)."""


def said(command: str, out: str) -> None:
    import fnmatch

    lines = iter(out.splitlines())
    for pattern in SAID.get(command, []):
        assert any(fnmatch.fnmatch(line, pattern) for line in lines), f"{command}: {pattern}\n{out}"


def read_lock(folder: Path) -> dict[str, dict[str, object]]:
    return dict(json.loads((folder / "backintel.lock.json").read_text())["scenarios"])


def run_files(folder: Path, run_id: str) -> tuple[dict[str, object], list[dict[str, object]]]:
    """A run's run.json and records (sorted by node id)."""
    base = folder / "results" / run_id
    records = [json.loads(line) for line in (base / "records.jsonl").read_text().splitlines()]
    return json.loads((base / "run.json").read_text()), sorted(records, key=lambda r: r["nodeid"])


def installed_tree() -> list[tuple[str, int, int]]:
    """Every file of the installed packages (bytecode caches aside), to show none is added."""
    import importlib.util

    out = []
    for name in ("pytest_backintel", "analyst", "scenarios", "stores", "reports"):
        spec = importlib.util.find_spec(name)
        assert spec is not None
        assert spec.origin is not None
        base = Path(spec.origin).parent
        for path in sorted(base.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                st = path.stat()
                out.append((str(path), st.st_size, st.st_mtime_ns))
    return out


def drop_tutorial_database() -> None:
    import sqlalchemy as sa

    server = sa.create_engine(MARIADB.rsplit("/", 1)[0] + "/test")
    with server.begin() as con:
        con.exec_driver_sql("DROP DATABASE IF EXISTS shop_bench")
    server.dispose()


def test_the_tutorial_runs_as_written(tmp_path: Path) -> None:
    files, commands = tutorial()
    assert commands[:2] == ["uv init --bare", "uv add --dev ../backintel-bench"]
    assert [c for c, _ in EXPECTED_CODES] == commands[2:], "the tutorial's commands changed"
    before = installed_tree()
    project = tmp_path / "shop-bench"
    project.mkdir()
    # what `uv init --bare` writes; `uv add` only adds the dependency (installed here already)
    init = '[project]\nname = "shop-bench"\nversion = "0.1.0"\nrequires-python = ">=3.11"\n'
    (project / "pyproject.toml").write_text(init)
    for name, body in files.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        with (project / name).open("a") as f:
            f.write(body)
    for command, code in EXPECTED_CODES:
        result = run(project, command)
        assert result.returncode == code, f"{command}:\n{result.stdout}\n{result.stderr}"
        assert "Traceback" not in result.stderr, f"{command}:\n{result.stderr}"
        said(command, result.stdout)
        if command.startswith("uv run backintel validate") and code == 1:
            missing = [ln for ln in result.stderr.splitlines() if "no lock file" in ln]
            assert len(missing) == len(ANSWERABLE), result.stderr
            assert all(re.match(r".*\.scenario\.yaml:\d+: reference: ", ln) for ln in missing)

    lock = json.loads((project / "scenarios" / "backintel.lock.json").read_text())
    assert set(lock["scenarios"]) == ANSWERABLE
    values = {sid: entry["values"] for sid, entry in lock["scenarios"].items()}
    assert values == {
        "delivered-orders": {"delivered_orders": 4},
        "delivered-revenue": {"delivered_revenue": 126.0},
        "canceled-share": {"canceled_share": 0.2},
    }
    assert outcomes(project, "reference") == dict.fromkeys(ANSWERABLE | UNANSWERABLE, "pass")
    refuse = outcomes(project, "refuse-all")
    assert {s for s, o in refuse.items() if o == "pass"} == UNANSWERABLE
    assert {refuse[s] for s in ANSWERABLE} == {"false_refusal"}
    perturbed = outcomes(project, "perturbed")
    assert {perturbed[s] for s in ANSWERABLE} == {"wrong_value"}
    assert {perturbed[s] for s in UNANSWERABLE} == {"pass"}
    assert outcomes(project, "mine") == {
        "delivered-orders": "pass",
        "delivered-revenue": "false_refusal",
        "canceled-share": "false_refusal",
        "gross-margin": "unhelpful_refusal",
        "customer-age": "unhelpful_refusal",
    }
    scorecard = (project / "results" / "mine" / "scorecard.md").read_text()
    assert "| cost (USD, prices as of " in scorecard
    assert " | $0.0000 |" in scorecard, "an agent that asked no model costs nothing"
    assert {r["cost_usd"] for r in run_files(project, "mine")[1]} == {0.0}
    assert outcomes(project, "mine-v2") == outcomes(project, "mine") | {"delivered-revenue": "pass"}
    # the suite: bound by alias in the suite file, over SQLite and then over Parquet
    assert outcomes(project, "suite") == dict.fromkeys(SUITE, "pass")
    assert outcomes(project, "suite-parquet") == dict.fromkeys(SUITE, "pass")
    locks = {
        sid: entry
        for folder in ("customers", "orders")
        for sid, entry in read_lock(project / "suites" / folder).items()
    }
    table = [{"country": "DE", "revenue": 126}, {"country": "FR", "revenue": 42}]
    assert {sid: e["values"] for sid, e in locks.items()} == {
        "german-customers": {"german_customers": 2},
        "top-country": {"top_country": "DE"},
        "revenue-by-country": {"revenue_by_country": table},
        "order-span": {"order_span_days": 57.0},
    }
    for entry in locks.values():  # the Parquet binding's values, locked beside them
        assert entry["dataset"] == "sqlite:../shop.sqlite"
        (label, other), *_ = entry["also"].items()
        assert label == "parquet:exports"
        assert other["data_hash"] != entry["data_hash"]
    sqlite_run, parquet_run = (run_files(project, r) for r in ("suite", "suite-parquet"))
    assert parquet_run[0]["datasets"] == {"shop": f"parquet:{project / 'exports'}"}
    assert sqlite_run[0]["datasets"] == {}
    assert {r["backend"] for r in sqlite_run[1]} == {"sqlite"}
    assert {r["backend"] for r in parquet_run[1]} == {"lake-parquet"}
    assert [r["nodeid"] for r in sqlite_run[1]] == [r["nodeid"] for r in parquet_run[1]]
    assert {r["suite"] for r in parquet_run[1]} == {"shop"}
    # the same suite on MariaDB, through the sqlalchemy store, with the same outcomes
    mariadb_run = run_files(project, "suite-mariadb")
    assert outcomes(project, "suite-mariadb") == dict.fromkeys(SUITE, "pass")
    assert mariadb_run[0]["datasets"] == {"shop": f"sqlalchemy:{MARIADB}"}
    assert {r["backend"] for r in mariadb_run[1]} == {"sqlalchemy"}
    assert [r["nodeid"] for r in mariadb_run[1]] == [r["nodeid"] for r in sqlite_run[1]]
    drop_tutorial_database()
    assert (project / ".gitignore").read_text() == "data/\nresults/\n"
    schema = json.loads((project / "scenario.schema.json").read_text())
    for path in sorted((project / "scenarios").glob("*.scenario.yaml")):
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)  # what an editor checks
    suite_scenario = project / "suites" / "customers" / "german-customers.scenario.yaml"
    jsonschema.validate(yaml.safe_load(suite_scenario.read_text()), schema)  # no `dataset` here
    with pytest.raises(jsonschema.ValidationError, match="famly"):
        jsonschema.validate({**yaml.safe_load(path.read_text()), "famly": "x"}, schema)
    assert (project / "data" / "stores").is_dir()  # built stores live in the project
    assert installed_tree() == before, "something was written into the installed package"
