"""Scenario files: YAML in, validated `Scenario` out, errors naming `file:line` and the field."""

from __future__ import annotations

import ast
import inspect
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from pytest_backintel import outcomes as outcomes_module
from pytest_backintel import scenario as scenario_module
from pytest_backintel import tolerance as tolerance_module
from pytest_backintel.collect.suites import (
    SHARED,
    SUITE_FILE,
    SuiteFileError,
    inherited,
    resolve_alias,
)
from pytest_backintel.scenario import Scenario

__all__ = [
    "SCHEMA_PATH",
    "ScenarioFileError",
    "load_scenario_file",
    "scenario_json_schema",
]

_FastLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's loader when PyYAML has it (about 15x faster); the YAML is read the same way."""

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "scenarios" / "scenario.schema.json"
"""The committed JSON Schema; scenario files point editors at it with a `$schema` modeline."""


Problem = tuple[int, str, str] | tuple[int, str, str, Path]
"""`(line, field, what is wrong)`, with the file when it is not the scenario's own (a suite
file the field was inherited from)."""


class ScenarioFileError(Exception):
    """A scenario file is invalid; `str()` is `file:line: field: what is wrong`."""

    def __init__(self, path: Path, problems: Sequence[Problem]) -> None:
        self.path = path
        self.problems = list(problems)
        lines = []
        for problem in problems:
            line, field, msg = problem[:3]
            where = problem[3] if len(problem) > 3 else path
            lines.append(f"{where}:{line}: {field}: {msg}" if field else f"{where}:{line}: {msg}")
        super().__init__("\n".join(lines))


def attribute_docs(module: ModuleType) -> dict[str, dict[str, str]]:
    """{class name: {field: docstring}} for the string literals that follow an annotated
    assignment in each top-level class of `module` (what pydantic's `use_attribute_docstrings`
    reads, from one parse of the file)."""
    tree = ast.parse(inspect.getsource(module))
    docs: dict[str, dict[str, str]] = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for prev, stmt in itertools.pairwise(cls.body):
            if (
                isinstance(prev, ast.AnnAssign)
                and isinstance(prev.target, ast.Name)
                and isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            ):
                docs.setdefault(cls.name, {})[prev.target.id] = inspect.cleandoc(stmt.value.value)
    return docs


def _describe_fields(schema: dict[str, Any]) -> None:
    """Each scenario model's attribute docstrings as its properties' descriptions."""
    defs = schema.get("$defs", {})
    modules = (scenario_module, tolerance_module, outcomes_module)  # where the specs live
    docs = {name: f for module in modules for name, f in attribute_docs(module).items()}
    for name, fields in docs.items():
        props = (schema if name == Scenario.__name__ else defs.get(name, {})).get("properties")
        for field, doc in fields.items():
            if props is not None and field in props:
                props[field].setdefault("description", doc)


def scenario_json_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario file, generated from the pydantic model."""
    schema = Scenario.model_json_schema()
    _describe_fields(schema)
    schema["required"] = [f for f in schema["required"] if f not in SHARED]  # or a suite gives
    schema["properties"]["dataset"] = {  # or an alias a suite file binds
        "anyOf": [
            {"$ref": "#/$defs/DatasetBinding"},
            {"type": "string", "description": "a dataset alias a suite file's `datasets` binds"},
        ]
    }
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://backintel.dev/schema/scenario.schema.json"
    return schema


def render_json_schema() -> str:
    return json.dumps(scenario_json_schema(), indent=2, sort_keys=True) + "\n"


def _node_at(node: yaml.Node, loc: tuple[int | str, ...]) -> yaml.Node:
    """The deepest YAML node along a pydantic error location."""
    for part in loc:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            match = [(k, v) for k, v in node.value if k.value == part]
            if not match:
                return node
            key, value = match[0]
            node = key if _is_extra_key(loc, part) else value
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return node
            node = node.value[part]
        else:
            return node
    return node


def _is_extra_key(loc: tuple[int | str, ...], part: int | str) -> bool:
    return bool(loc) and loc[-1] == part


def _allowed_fields(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str] | None:
    """The field names allowed where an unknown field was found."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return None
        ann = field.annotation
        args = [a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type)]
        models = [a for a in args if issubclass(a, BaseModel)]
        if not models:
            return None
        current = models[0]
    return sorted(getattr(current, "model_fields", {}))


def _describe(err: Any) -> tuple[str, str]:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p))
    field = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in loc).replace(".[", "[")
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        allowed = _allowed_fields(Scenario, loc)
        msg = "unknown field" + (f"; allowed: {', '.join(allowed)}" if allowed else "")
    elif err["type"] == "missing":
        msg = "required field is missing"
        if len(loc) == 1 and loc[0] in SHARED:
            msg += f" (give it here or in a {SUITE_FILE} in this folder or above)"
    elif "input" in err and err["type"] != "value_error":
        msg = f"{msg} (got {err['input']!r})"
    return field, msg


def load_scenario_file(path: Path) -> Scenario:
    """Read and validate one scenario file; raise `ScenarioFileError` with `file:line`."""
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.load(text, Loader=_FastLoader)
    except yaml.MarkedYAMLError as exc:
        line = (exc.problem_mark.line + 1) if exc.problem_mark else 1
        raise ScenarioFileError(path, [(line, "", f"invalid YAML: {exc.problem}")]) from exc
    if not isinstance(data, dict):
        raise ScenarioFileError(path, [(1, "", "a scenario file holds one YAML mapping")])
    try:
        suites = inherited(path, data)
    except SuiteFileError as exc:
        raise ScenarioFileError(exc.path, exc.problems) from exc
    context: dict[str, Any] = {"base_dir": path.resolve().parent}
    if "dataset" in suites:  # its paths are relative to the suite file
        context["source_dir"] = suites["dataset"].path.parent
    merged = {**{k: s.defaults[k] for k, s in suites.items()}, **data}
    if isinstance(merged.get("dataset"), str):  # an alias a suite file (or --dataset) binds
        found = resolve_alias(path, merged["dataset"])
        if found is None:
            file, line = locate(path, ("dataset",))
            msg = f"no suite file above binds the dataset alias {merged['dataset']!r}"
            msg += f" (give it in `datasets:` of a {SUITE_FILE}, or bind it with --dataset)"
            raise ScenarioFileError(path, [(line, "dataset", msg, file)])
        merged["dataset"], context["source_dir"] = found
    try:
        return Scenario.model_validate(merged, context=context)
    except ValidationError as exc:
        problems: list[Problem] = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            suite = suites.get(str(loc[0])) if loc else None
            source = suite.path if suite is not None else path
            root = _compose(source)  # line numbers, only when reporting
            node = _node_at(root, loc) if root is not None else None
            line = 1 if node is None else node.start_mark.line + 1
            field, msg = _describe(err)
            problems.append((line, field, msg) if suite is None else (line, field, msg, source))
        raise ScenarioFileError(path, sorted(problems, key=lambda p: (len(p) > 3, p[:3]))) from exc


def _compose(path: Path) -> yaml.Node | None:
    return yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)


def line_of(path: Path, loc: tuple[int | str, ...]) -> int:
    """The 1-based line of the YAML node at `loc` in a scenario file (1 when not found)."""
    root = _compose(path)
    return 1 if root is None else _node_at(root, loc).start_mark.line + 1


def locate(path: Path, loc: tuple[int | str, ...]) -> tuple[Path, int]:
    """The file and line that give `loc` for the scenario in `path`: the scenario file, or the
    suite file the field is inherited from."""
    root = _compose(path)
    given = isinstance(root, yaml.MappingNode) and any(k.value == loc[0] for k, _ in root.value)
    if not given and isinstance(root, yaml.MappingNode):
        suite = inherited(path, {str(k.value): None for k, _ in root.value}).get(str(loc[0]))
        if suite is not None:
            return suite.path, line_of(suite.path, loc)
    return path, 1 if root is None else _node_at(root, loc).start_mark.line + 1


def where(path: Path, loc: tuple[int | str, ...]) -> str:
    """`file:line` of `loc` for the scenario in `path` (see `locate`)."""
    file, line = locate(path, loc)
    return f"{file}:{line}"


DEFINITIONS_DIR = SCHEMA_PATH.parent / "definitions"


def find_scenarios(root: Path = DEFINITIONS_DIR) -> dict[str, tuple[Path, Scenario]]:
    """Every scenario file under `root` by id; a repeated id is an error naming both files."""
    found: dict[str, tuple[Path, Scenario]] = {}
    for path in sorted(root.rglob("*.scenario.yaml")):
        scenario = load_scenario_file(path)
        if scenario.id in found:
            raise ScenarioFileError(
                path, [(1, "id", f"{scenario.id!r} is already defined in {found[scenario.id][0]}")]
            )
        found[scenario.id] = (path, scenario)
    return found
