"""Mistakes in a suite of your own caught before a token is spent: a locked value that does not
fit its metric's kind, a reference query whose columns are not the metrics, an invalid file
given to `references build`, each reported as `file:line`, the value and what is allowed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_own_data import backintel, project

from pytest_backintel.collect.lockfile import check_columns, check_values
from pytest_backintel.scenario import Scenario


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (old, text)
    path.write_text(text.replace(old, new))


def test_a_currency_sum_declared_count_and_an_alias_that_is_not_the_metric(tmp_path: Path) -> None:
    folder = project(tmp_path)
    scenarios = folder / "scenarios"
    revenue = scenarios / "delivered-revenue.scenario.yaml"
    share = scenarios / "canceled-share.scenario.yaml"
    edit(revenue, "kind: currency", "kind: count")
    edit(share, "END) AS canceled_share", "END) AS share")

    build = backintel(folder, "references", "build")
    assert build.returncode == 1
    assert "Traceback" not in build.stderr
    lines = build.stderr.splitlines()
    assert any(
        re.fullmatch(
            r"backintel references build: scenarios/delivered-revenue\.scenario\.yaml:11: "
            r"metrics\[0\]\.kind: metric 'delivered_revenue' is declared `count` but its reference "
            r"value 126\.0 is a decimal number, not an integer .*; a count is a whole number "
            r"\(an integer\)",
            line,
        )
        for line in lines
    ), build.stderr
    assert any(
        line.startswith("backintel references build: scenarios/canceled-share.scenario.yaml:13: ")
        and "returns columns share but needs one column per metric" in line
        and "no column canceled_share" in line
        for line in lines
    ), build.stderr
    assert not (scenarios / "backintel.lock.json").exists()  # nothing is locked as a count

    # validate finds both too, against a lock built before the mistakes
    edit(revenue, "kind: count", "kind: currency")
    edit(share, "END) AS share", "END) AS canceled_share")
    assert backintel(folder, "references", "build").returncode == 0
    edit(revenue, "kind: currency", "kind: count")
    edit(share, "END) AS canceled_share", "END) AS share")
    checked = backintel(folder, "validate", "scenarios")
    assert checked.returncode == 1
    assert (
        "scenarios/delivered-revenue.scenario.yaml:11: metrics[0].kind: metric "
        "'delivered_revenue' is declared `count` but its reference value 126.0"
    ) in checked.stderr
    assert (
        "scenarios/canceled-share.scenario.yaml:13: reference.sql: returns columns share but "
        "needs one column per metric, named as the metric: no column canceled_share "
        "(name it with `AS canceled_share`)"
    ) in checked.stderr


def test_references_build_reports_every_invalid_file_without_a_traceback(tmp_path: Path) -> None:
    folder = project(tmp_path)
    scenarios = folder / "scenarios"
    edit(scenarios / "customer-age.scenario.yaml", "family: customers", "famly: customers")
    (scenarios / "broken.scenario.yaml").write_text("id: [unclosed\n")
    build = backintel(folder, "references", "build")
    assert build.returncode == 1
    assert "Traceback" not in build.stderr
    assert "scenarios/customer-age.scenario.yaml:8: famly: unknown field" in build.stderr
    assert re.search(r"scenarios/broken\.scenario\.yaml:\d+: invalid YAML", build.stderr)
    validate = backintel(folder, "validate", "scenarios")
    assert "scenarios/customer-age.scenario.yaml:8: famly: unknown field" in validate.stderr


def test_a_table_with_a_key_column_missing_and_text_declared_count(tmp_path: Path) -> None:
    folder = project(tmp_path)
    (folder / "scenarios" / "top.scenario.yaml").write_text(
        """
id: top
version: 1
title: Top country
question: Which country has the most customers, and what is the revenue per country?
dataset: {sqlite: ../shop.sqlite}
split: development
level: 1
family: customers
answerable: true
metrics:
  - {name: top_country, kind: count, unit: country}
reference:
  sql: SELECT country AS top_country FROM customers GROUP BY country ORDER BY COUNT(*) DESC LIMIT 1
"""
    )
    (folder / "scenarios" / "table.scenario.yaml").write_text(
        """
id: by-country
version: 1
title: Customers per country
question: How many customers per country?
dataset: {sqlite: ../shop.sqlite}
split: development
level: 1
family: customers
answerable: true
metrics:
  - name: customers_by_country
    kind: table
    unit: customers
    columns: [{name: country, kind: text}, {name: customers, kind: count}]
    key: [country]
reference:
  sql: SELECT country AS cc, COUNT(*) AS customers FROM customers GROUP BY country
"""
    )
    build = backintel(folder, "references", "build")
    assert build.returncode == 1
    assert "scenarios/top.scenario.yaml:12: metrics[0].kind: metric 'top_country' is declared " \
        "`count` but its reference value 'DE' is not a number" in build.stderr  # fmt: skip
    assert (
        "scenarios/table.scenario.yaml:18: reference.sql: scenario 'by-country': reference.sql "
        "returns columns cc, customers but needs the table's columns: no column country"
    ) in build.stderr


# -- the checks themselves ----------------------------------------------------------------


def scenario(*metrics: dict[str, Any]) -> Scenario:
    return Scenario.model_validate(
        {
            "id": "s",
            "version": 1,
            "title": "t",
            "question": "q",
            "dataset": {"sqlite": "x.sqlite"},
            "split": "development",
            "level": 1,
            "family": "f",
            "answerable": True,
            "metrics": list(metrics),
            "check_sql": "SELECT 1",
        }
    )


@pytest.mark.parametrize(
    ("kind", "value", "ok"),
    [
        ("count", 4, True),
        ("count", 4.0, False),
        ("count", 469.58, False),
        ("count", True, False),
        ("count", "4", False),
        ("count", None, False),
        ("currency", 469.58, True),
        ("currency", 12, True),
        ("currency", "12.00", False),
        ("currency", float("nan"), False),
        ("ratio", 0.2, True),
        ("duration", 57.0, True),
        ("text", "Rock", True),
        ("text", 3, False),
    ],
)
def test_a_scalar_value_fits_its_kind_or_is_named(kind: str, value: Any, ok: bool) -> None:
    found = check_values(scenario({"name": "m", "kind": kind, "unit": "u"}), {"m": value})
    assert (found == []) is ok, found
    if not ok:
        ((loc, message),) = found
        assert loc == ("metrics", 0, "kind")
        assert f"declared `{kind}`" in message
        assert ("NULL" if value is None else repr(value)[:6]) in message


TABLE = {
    "name": "t",
    "kind": "table",
    "unit": "u",
    "columns": [{"name": "k", "kind": "text"}, {"name": "v", "kind": "currency"}],
    "key": ["k"],
}


def test_a_table_value_is_rows_with_the_declared_columns_and_a_unique_key() -> None:
    spec = scenario(TABLE)
    assert check_values(spec, {"t": [{"k": "a", "v": 1.5}, {"k": "b", "v": None}]}) == []
    assert "not a list of rows" in check_values(spec, {"t": 3})[0][1]
    missing = check_values(spec, {"t": [{"key": "a", "v": 1.0}]})[0][1]
    assert "row 1 has no column k (it has key, v)" in missing
    assert "not a number" in check_values(spec, {"t": [{"k": "a", "v": "x"}]})[0][1]
    assert "key k repeats: ('a',)" in check_values(spec, {"t": [{"k": "a", "v": 1}] * 2})[0][1]
    many = check_values(spec, {"t": [{"k": i, "v": 1} for i in range(50)]})
    assert len(many) == 6  # bounded
    assert many[-1][1].endswith("and 45 more problem(s)")


@given(st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True))
def test_columns_are_checked_by_name(columns: list[str]) -> None:
    spec = scenario(
        {"name": "a", "kind": "count", "unit": "u"}, {"name": "b", "kind": "count", "unit": "u"}
    )
    problem = check_columns(spec, columns)
    assert (problem is None) == ({"a", "b"} <= set(columns))
    if problem is not None:
        assert f"returns columns {', '.join(columns) or '(none)'}" in problem


def test_the_lock_keeps_every_binding_and_a_run_takes_the_one_its_data_has(tmp_path: Path) -> None:
    from pytest_backintel.collect.lockfile import StaleLockError, reference_for

    folder = project(tmp_path)
    path = folder / "scenarios" / "delivered-orders.scenario.yaml"
    assert backintel(folder, "references", "build").returncode == 0
    lock = folder / "scenarios" / "backintel.lock.json"
    doc = json.loads(lock.read_text())
    entry = doc["scenarios"]["delivered-orders"]
    entry["also"] = {"parquet:x": {"data_hash": "feed", "values": {"delivered_orders": 9}}}
    lock.write_text(json.dumps(doc))
    from pytest_backintel.collect.loading import load_scenario_file

    loaded = load_scenario_file(path)
    assert reference_for(loaded, entry["data_hash"]) == {"delivered_orders": 4}
    assert reference_for(loaded, "feed") == {"delivered_orders": 9}
    with pytest.raises(StaleLockError, match=r"computed on data \w+ or feed \(parquet:x\)"):
        reference_for(loaded, "other")


ARGS = ["-k", "delivered-orders", "--model", "openai:gpt-5.1"]


def test_a_missing_provider_key_is_one_line_in_our_words(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    folder = project(tmp_path)
    assert backintel(folder, "references", "build").returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "pytest"), "scenarios", "-p", "no:xdist", *ARGS],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert (
        "ERROR: backintel: --model openai:gpt-5.1 cannot be used: no API key: set OPENAI_API_KEY "
        "in the environment"
    ) in done.stderr
    assert "OpenAIProvider(api_key" not in done.stderr  # not the provider library's advice
    assert not (folder / "results").exists() or not any((folder / "results").rglob("*.jsonl"))


def test_one_run_over_a_copied_suite_is_refused_naming_both_files(tmp_path: Path) -> None:
    import shutil
    import subprocess
    import sys

    folder = project(tmp_path)
    assert backintel(folder, "references", "build").returncode == 0
    shutil.copytree(folder / "scenarios", folder / "copy")
    done = subprocess.run(
        [str(Path(sys.executable).parent / "pytest"), "scenarios", "copy", "-p", "no:xdist"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "refusing to start: one run measures each scenario id once" in done.stderr
    assert (
        f"scenario id 'canceled-share' is given by both {folder}/scenarios/canceled-share"
        f".scenario.yaml and {folder}/copy/canceled-share.scenario.yaml"
    ) in done.stderr
    assert "--dataset" in done.stderr


def test_validate_leaves_nothing_in_the_temporary_folder(tmp_path: Path) -> None:
    """`validate` (with or without --dataset) and `references build` keep their caches under
    the project's data folder: nothing (no `hashes`, no `logical`) is left in $TMPDIR."""
    import os
    import subprocess
    import sys

    folder = project(tmp_path / "p")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = os.environ | {"TMPDIR": str(tmp)}
    exe = str(Path(sys.executable).parent / "backintel")
    for args in (
        ["references", "build"],
        ["validate", "scenarios", "suites"],
        ["validate", "suites", "--dataset", "shop=sqlite:shop.sqlite"],
    ):
        done = subprocess.run(
            [exe, *args], cwd=folder, env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        assert sorted(p.name for p in tmp.iterdir()) == [], args


def test_a_csv_file_gone_since_the_lock_is_named_as_a_missing_file(tmp_path: Path) -> None:
    """A table's CSV file deleted after `references build`: the run's refusal and `validate`
    name the missing file (not only two data hashes), and rebuilding names it too, instead of
    the engine's "Table with name orders does not exist! Did you mean ...?"."""
    import duckdb
    from test_own_data import pytest_run, write_parquet

    exports = tmp_path / "exports"
    write_parquet(exports)
    csv = tmp_path / "csv"
    csv.mkdir()
    for table in ("orders", "customers"):
        duckdb.sql(f"COPY (FROM read_parquet('{exports}/{table}.parquet')) TO '{csv}/{table}.csv'")
    folder = project(tmp_path, "{csv: ../csv}")
    assert backintel(folder, "references", "build").returncode == 0
    lock = json.loads((folder / "scenarios" / "backintel.lock.json").read_text())
    assert lock["scenarios"]["delivered-orders"]["files"] == ["customers.csv", "orders.csv"]
    (csv / "orders.csv").unlink()
    checked = backintel(folder, "validate", "scenarios")
    assert checked.returncode == 1
    assert f"the file(s) orders.csv it was computed with are missing from {csv}" in checked.stderr
    run = pytest_run(folder, "--run-id", "gone")
    assert run.returncode == pytest.ExitCode.USAGE_ERROR
    assert "orders.csv it was computed with are missing" in run.stderr, run.stderr
    rebuilt = backintel(folder, "references", "build")
    assert rebuilt.returncode == 1
    assert f"orders.csv it was computed with are missing from {csv}" in rebuilt.stderr
    assert "Traceback" not in rebuilt.stderr + run.stderr + checked.stderr


def test_score_case_takes_dataset_to_score_against_another_binding(tmp_path: Path) -> None:
    """`score --case ... --dataset shop=parquet:exports` re-runs the evidence on the suite's
    Parquet binding: DuckDB SQL (a `::` cast) reproduces there and not on the SQLite file."""
    import subprocess
    import sys

    folder = project(tmp_path)
    subprocess.run([sys.executable, "export_parquet.py"], cwd=folder, check=True)
    assert backintel(folder, "references", "build").returncode == 0
    parquet = ("--dataset", "shop=parquet:exports")
    assert backintel(folder, "references", "build", *parquet).returncode == 0
    lock = json.loads((folder / "suites" / "customers" / "backintel.lock.json").read_text())
    value = lock["scenarios"]["german-customers"]["values"]["german_customers"]
    sql = "SELECT COUNT(*)::BIGINT AS german_customers FROM customers WHERE country = 'DE'"
    answer = {
        "status": "answered",
        "metrics": [{"name": "german_customers", "value": value, "unit": "customers"}],
        "evidence": [{"id": "e1", "kind": "sql", "code": sql, "metrics": ["german_customers"]}],
        "method": "count",
        "caveats": [],
    }
    (folder / "answer.json").write_text(json.dumps(answer))
    on_parquet = backintel(folder, "score", "--case", "german-customers", "answer.json", *parquet)
    assert on_parquet.returncode == 0, on_parquet.stdout + on_parquet.stderr
    assert "pass" in on_parquet.stdout
    on_sqlite = backintel(folder, "score", "--case", "german-customers", "answer.json")
    assert on_sqlite.returncode == 1, on_sqlite.stdout + on_sqlite.stderr
    assert "unsupported_evidence" in on_sqlite.stdout
    bad = backintel(folder, "score", "--case", "german-customers", "answer.json", "--dataset", "x")
    assert bad.returncode == 2
    assert "backintel score:" in bad.stderr
