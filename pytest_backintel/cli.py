"""The `backintel` command: schema, data and reference builds, and scoring one answer by hand."""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import tempfile
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pytest_backintel.contract import AnalystAnswer, parse_answer
from pytest_backintel.evidence import reexecute
from pytest_backintel.loading import (
    SCHEMA_PATH,
    ScenarioFileError,
    find_scenarios,
    load_scenario_file,
    render_json_schema,
)
from pytest_backintel.manifests import find_manifest_case, manifest_reference
from pytest_backintel.worlds import data_dir, get_world

__all__ = ["main"]

ROOT = SCHEMA_PATH.parent.parent
COMMANDS_GROUP = "backintel.commands"
"""Entry points `register(subparsers, groups)` adding a package's own subcommands."""


def _schema(args: argparse.Namespace) -> int:
    text = render_json_schema()
    # the checkout's own copy when run inside it; never into an installed package
    target = SCHEMA_PATH if SCHEMA_PATH.is_relative_to(Path.cwd().resolve()) else None
    target = target or Path(SCHEMA_PATH.name)
    if args.out is not None:
        target = Path(args.out)
        target = target / SCHEMA_PATH.name if target.is_dir() else target
    if args.check:
        current = target.read_text() if target.exists() else ""
        if current != text:
            print(f"{target} is out of date: run `backintel schema`", file=sys.stderr)
            return 1
        print(f"{target} is up to date")
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    print(f"wrote {target}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from pytest_backintel.validate import validate_paths

    problems = validate_paths([Path(p) for p in args.paths or ["."]], world_queries=args.worlds)
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


def _references_build(args: argparse.Namespace) -> int:
    from pytest_backintel.references import build_locks

    done, problems = build_locks(
        [Path(p) for p in args.paths or ["."]], check=args.check, root=Path.cwd()
    )
    for line in done:
        print(line)
    for line in problems:
        print(f"backintel references build: {line}", file=sys.stderr)
    if not done and not problems:
        print("no answerable scenarios bound to data of your own were found")
    return 1 if problems else 0


def _data_build(args: argparse.Namespace) -> int:
    world = get_world(args.world)
    files = world.ensure_built(data_dir(Path.cwd()), snapshot=args.snapshot)
    print(f"{args.world}: {files.parquet_dir} (data hash {world.data_hash(files)})")
    return 0


def _score(args: argparse.Namespace) -> int:
    """Score one hand-written answer against one scenario, as a trial would."""
    from pytest_backintel.backends import bound_store
    from pytest_backintel.references import discover
    from pytest_backintel.scoring import score_answer
    from pytest_backintel.user_data import world_for

    if args.scenario is not None:
        scenario = load_scenario_file(Path(args.scenario))
        scenarios, args.case = {scenario.id: (Path(args.scenario), scenario)}, scenario.id
    else:  # the suites under the current folder, then the shipped benchmark
        try:
            scenarios = {s.id: (p, s) for p, s in discover([Path.cwd()])} | find_scenarios()
        except ScenarioFileError as exc:
            print(f"{exc}\n(fix it, or name the case's file with --scenario)", file=sys.stderr)
            return 2
    manifest_case = None if args.case in scenarios else find_manifest_case(ROOT, args.case)
    if args.case in scenarios:
        scenario = scenarios[args.case][1]
    elif manifest_case is not None:
        scenario = manifest_case[1]
    else:
        close = difflib.get_close_matches(args.case, list(scenarios), n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        print(f"unknown case {args.case!r}.{hint}", file=sys.stderr)
        return 2
    try:
        output = parse_answer(Path(args.answer).read_bytes())
    except ValidationError as exc:
        print(f"{args.answer}: not a contract answer:\n{exc}", file=sys.stderr)
        return 2
    world = world_for(scenario.dataset)
    files = world.ensure_built(data_dir(Path.cwd()), snapshot=scenario.dataset.snapshot)
    with tempfile.TemporaryDirectory() as tmp:
        backend = bound_store(scenario, args.store, Path(tmp))
        backend.setup_session()
        store = backend.provision(files)
        try:
            evidence = (
                reexecute(output, scenario, store) if isinstance(output, AnalystAnswer) else []
            )
        finally:
            store.teardown()
            backend.teardown_session()
    if not scenario.answerable:
        reference: Mapping[str, Any] = {}
    elif manifest_case is not None:
        reference = manifest_reference(manifest_case[0], scenario.id)
    else:
        reference = world.reference(scenario, files, world.data_hash(files))
    score = score_answer(scenario, output, evidence, reference)
    print(
        json.dumps(
            {
                "case": scenario.id,
                "outcome": score.outcome.value,
                "reasons": [r.message for r in score.reasons],
                "evidence": [e.to_json() for e in evidence],
            },
            indent=2,
            default=str,
        )
    )
    return 0 if score.outcome.passed else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="backintel", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("schema", help="write the scenario JSON Schema generated from the model")
    p.add_argument("--check", action="store_true", help="fail if the written schema differs")
    p.add_argument(
        "--out",
        help="file or folder to write it to (default: the checkout's own "
        "scenarios/scenario.schema.json, else ./scenario.schema.json)",
    )
    p.set_defaults(func=_schema)
    p = sub.add_parser("validate", help="validate scenario files and folders (default: .)")
    p.add_argument("paths", nargs="*")
    p.add_argument(
        "--world-queries", dest="worlds", action="store_true", help="run check queries on worlds"
    )
    p.set_defaults(func=_validate)
    refs = sub.add_parser("references", help="references of your own suites").add_subparsers(
        dest="refs_cmd", required=True
    )
    p = refs.add_parser("build", help="compute references into the lock file beside scenarios")
    p.add_argument("paths", nargs="*", help="folders or files to search (default: .)")
    p.add_argument("--check", action="store_true", help="verify the lock files, write nothing")
    p.set_defaults(func=_references_build)
    data = sub.add_parser("data", help="datasets").add_subparsers(dest="data_cmd", required=True)
    p = data.add_parser("build", help="generate a world's Parquet and SQLite files")
    p.add_argument("--world", default="olist")
    p.add_argument("--snapshot", default="base", help="a named snapshot (e.g. tpch: sf1)")
    p.set_defaults(func=_data_build)
    p = sub.add_parser("score", help="score one answer (JSON) for one case")
    case = p.add_mutually_exclusive_group(required=True)
    case.add_argument("--case", help="scenario id")
    case.add_argument("--scenario", help="a scenario file (e.g. one of your own)")
    p.add_argument("--store", default="sqlite", help="store backend to re-execute evidence on")
    p.add_argument("answer", help="the answer's JSON file")
    p.set_defaults(func=_score)
    for command in sorted(entry_points(group=COMMANDS_GROUP), key=lambda ep: ep.name):
        command.load()(sub, {"data": data, "references": refs})
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
