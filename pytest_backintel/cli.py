"""The `backintel` command: schema, data and reference builds, and scoring one answer by hand."""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path

from pydantic import ValidationError

from pytest_backintel.cleanup import register as register_clean
from pytest_backintel.contract import parse_answer
from pytest_backintel.loading import (
    SCHEMA_PATH,
    ScenarioFileError,
    check_world,
    find_scenarios,
    load_scenario_file,
    render_json_schema,
)
from pytest_backintel.manifests import find_manifest_case
from pytest_backintel.worlds import data_dir, get_world

__all__ = ["main"]

ROOT = SCHEMA_PATH.parent.parent
COMMANDS_GROUP = "backintel.commands"
"""Entry points `register(subparsers, groups)` adding a package's own subcommands."""


def _schema(args: argparse.Namespace) -> int:
    text = render_json_schema()
    if args.check:
        current = SCHEMA_PATH.read_text() if SCHEMA_PATH.exists() else ""
        if current != text:
            print(f"{SCHEMA_PATH} is out of date: run `backintel schema`", file=sys.stderr)
            return 1
        print(f"{SCHEMA_PATH} is up to date")
        return 0
    SCHEMA_PATH.write_text(text)
    print(f"wrote {SCHEMA_PATH}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    bad = 0
    for name in args.files:
        try:
            check_world(Path(name), load_scenario_file(Path(name)))
        except ScenarioFileError as exc:
            print(exc, file=sys.stderr)
            bad += 1
    return 1 if bad else 0


def _data_build(args: argparse.Namespace) -> int:
    world = get_world(args.world)
    files = world.ensure_built(data_dir(Path.cwd()), snapshot=args.snapshot)
    print(f"{args.world}: {files.parquet_dir} (data hash {world.data_hash(files)})")
    return 0


def _score(args: argparse.Namespace) -> int:
    """Score one hand-written answer against one scenario, exactly as a trial would."""
    import pytest

    from pytest_backintel.backends import store_spec
    from pytest_backintel.hand_score import HandScorer

    scenarios = find_scenarios()
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
    scorer = HandScorer(data_dir(Path.cwd()), store=args.store, sandbox=args.sandbox)
    try:
        score, evidence = scorer.score(
            scenario, output, manifest_case[0] if manifest_case is not None else None
        )
    except pytest.UsageError as exc:
        print(f"backintel score: {exc}", file=sys.stderr)
        return 2
    finally:
        scorer.close()
    print(
        json.dumps(
            {
                "case": scenario.id,
                "store": store_spec(scenario, args.store),
                "outcome": score.outcome.value,
                "reasons": [r.message for r in score.reasons],
                "evidence": [e.to_json() for e in evidence],
            },
            indent=2,
            default=str,
        )
    )
    return 0 if score.outcome.passed else 1


def _freeze_check(args: argparse.Namespace) -> int:
    """Refuse a candidate whose diff against the frozen baseline leaves the worker allowlist."""
    from pytest_backintel.allowlist import ALLOWLIST_FILE, AllowlistError, check_worker_diff

    root = Path(args.repo).resolve()
    try:
        done = check_worker_diff(root, root / args.results_dir, args.baseline, args.candidate)
    except AllowlistError as exc:
        print(f"backintel freeze check: {exc}", file=sys.stderr)
        return 1
    if done["allowlist"] is None:
        print(f"no {ALLOWLIST_FILE} in {root}: nothing restricts what a worker may change")
    elif done["baseline"] is None:
        print(f"candidate {done['candidate'][:12]}: no frozen baseline yet (nothing to compare)")
    else:
        print(
            f"candidate {done['candidate'][:12]} against baseline {done['baseline'][:12]}: "
            f"{len(done['changed'])} changed path(s), all inside {ALLOWLIST_FILE} [edit]"
        )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="backintel", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("schema", help="write scenarios/scenario.schema.json from the model")
    p.add_argument("--check", action="store_true", help="fail if the committed schema differs")
    p.set_defaults(func=_schema)
    p = sub.add_parser("validate", help="validate scenario files")
    p.add_argument("files", nargs="+")
    p.set_defaults(func=_validate)
    data = sub.add_parser("data", help="datasets").add_subparsers(dest="data_cmd", required=True)
    p = data.add_parser("build", help="generate a world's Parquet and SQLite files")
    p.add_argument("--world", default="olist")
    p.add_argument("--snapshot", default="base", help="a named snapshot (e.g. tpch: sf1)")
    p.set_defaults(func=_data_build)
    p = sub.add_parser("score", help="score one answer (JSON) for one case")
    p.add_argument("--case", required=True, help="scenario id")
    p.add_argument(
        "--store",
        default="sqlite",
        help="store backend to re-execute evidence on (a scenario's own binding overrides it)",
    )
    p.add_argument(
        "--sandbox", default=None, help="sandbox backend for Python evidence (default as pytest)"
    )
    p.add_argument("answer", help="the answer's JSON file")
    p.set_defaults(func=_score)
    freeze = sub.add_parser("freeze", help="frozen runs").add_subparsers(
        dest="freeze_cmd", required=True
    )
    p = freeze.add_parser("check", help="refuse a candidate that edits outside the allowlist")
    p.add_argument("--baseline", default=None, help="frozen baseline (default: last frozen run)")
    p.add_argument("--candidate", default="HEAD", help="candidate commit")
    p.add_argument("--repo", default=".", help="repository root")
    p.add_argument("--results-dir", default="results", help="where frozen-runs.jsonl is")
    p.set_defaults(func=_freeze_check)
    register_clean(sub)
    for command in sorted(entry_points(group=COMMANDS_GROUP), key=lambda ep: ep.name):
        command.load()(sub, {"data": data})  # suites' and reports' own commands
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
