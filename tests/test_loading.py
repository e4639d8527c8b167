"""Scenario files: the committed schema matches the model; bad files name file:line and field."""

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from pytest_backintel.collect.loading import (
    DEFINITIONS_DIR,
    SCHEMA_PATH,
    ScenarioFileError,
    find_scenarios,
    load_scenario_file,
    render_json_schema,
)

GOOD = """\
# yaml-language-server: $schema=../scenario.schema.json
id: delivered
version: 1
title: Delivered orders
question: How many orders were delivered? Report metric `delivered_orders`.
dataset: {world: olist}
split: development
level: 1
family: counts
answerable: true
check_sql: SELECT COUNT(*) AS delivered_orders FROM orders
metrics:
  - name: delivered_orders
    kind: count
    unit: orders
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "case.scenario.yaml"
    path.write_text(text)
    return path


def test_committed_schema_is_generated_from_the_model() -> None:
    assert SCHEMA_PATH.read_text() == render_json_schema()


def test_every_committed_scenario_validates_against_the_schema() -> None:
    schema = json.loads(SCHEMA_PATH.read_text())
    scenarios = find_scenarios(DEFINITIONS_DIR)
    assert len(scenarios) >= 15
    for path, _ in scenarios.values():
        assert path.read_text().startswith("# yaml-language-server: $schema=")
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)


def test_a_good_file_loads(tmp_path: Path) -> None:
    assert load_scenario_file(write(tmp_path, GOOD)).id == "delivered"


@pytest.mark.parametrize(
    ("change", "line", "field", "words"),
    [
        (("family: counts", "family: counts\ncolour: red"), 10, "colour", "unknown field; allowed"),
        (("level: 1", "level: one"), 8, "level", "valid integer"),
        (("    kind: count\n", ""), 13, "metrics[0].kind", "required field is missing"),
        (("kind: count", "kind: percent"), 14, "metrics[0].kind", "'count', 'currency'"),
        (("split: development", "split: dev"), 7, "split", "'development', 'reserved'"),
    ],
)
def test_bad_files_name_file_line_field_and_what_is_allowed(
    tmp_path: Path, change: tuple[str, str], line: int, field: str, words: str
) -> None:
    path = write(tmp_path, GOOD.replace(*change))
    with pytest.raises(ScenarioFileError) as info:
        load_scenario_file(path)
    message = str(info.value)
    assert f"{path}:{line}: {field}: " in message
    assert words in message


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("level: 1", "level: [1"))
    with pytest.raises(ScenarioFileError, match=rf"{path}:\d+: invalid YAML"):
        load_scenario_file(path)


def test_rule_violations_are_reported(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("answerable: true", "answerable: false"))
    with pytest.raises(ScenarioFileError, match="unanswerable scenario needs `refusal`"):
        load_scenario_file(path)


def test_the_nearest_suite_file_gives_what_a_scenario_leaves_out(tmp_path: Path) -> None:
    (tmp_path / "backintel-suite.yaml").write_text("family: from_outside\n")
    tmp_path = tmp_path / "project"
    tmp_path.mkdir()
    (tmp_path / "pyproject.toml").write_text("")  # the search stops at the project root
    (tmp_path / "backintel-suite.yaml").write_text(
        "dataset: {world: olist}\nsplit: regression\nlevel: 2\nfamily: outer\n"
    )
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "backintel-suite.yaml").write_text("level: 3\n")
    bare = GOOD.replace("dataset: {world: olist}\n", "").replace("split: development\n", "")
    inherits = tmp_path / "sub" / "a.scenario.yaml"
    inherits.write_text(bare.replace("level: 1\n", "").replace("family: counts\n", ""))
    scenario = load_scenario_file(inherits)
    assert (scenario.dataset.world, scenario.split.value) == ("olist", "regression")
    assert (scenario.level, scenario.family) == (3, "outer"), "the nearest suite file first"
    own = tmp_path / "sub" / "b.scenario.yaml"
    own.write_text(bare.replace("id: delivered", "id: own"))
    assert (load_scenario_file(own).level, load_scenario_file(own).family) == (1, "counts")
    (tmp_path / "backintel-suite.yaml").unlink()
    with pytest.raises(ScenarioFileError) as missing:
        load_scenario_file(inherits)
    assert f"{inherits}:2: dataset: required field is missing (give it here or in a " in str(
        missing.value
    )
    assert "from_outside" not in str(missing.value)
