"""The `backintel` command: schema, data and reference builds, and scoring one answer by hand."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_backintel.cli.common import rebound
from pytest_backintel.cli.rewrite_imports import register as register_rewrite_imports
from pytest_backintel.cli.score import score_command
from pytest_backintel.cli.store_table import register as register_stores
from pytest_backintel.run.cleanup import register as register_clean
from pytest_backintel.run.external.serve import register as register_serve_tools
from pytest_backintel.run.merge import register as register_merge

if TYPE_CHECKING:
    pass

__all__ = ["main"]

# What a subcommand needs (pydantic, pyarrow, DuckDB, pytest) is imported by its handler, so
# `backintel --help` and argument errors answer at once (tests/test_cli_imports.py).
COMMANDS_GROUP = "backintel.commands"
"""Entry points `register(subparsers, groups)` adding a package's own subcommands."""


def _schema(args: argparse.Namespace) -> int:
    from pytest_backintel.collect.loading import SCHEMA_PATH, render_json_schema

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
    from pytest_backintel.collect.validate import validate_paths

    if not rebound(args, "validate"):
        return 2
    problems = validate_paths([Path(p) for p in args.paths or ["."]], world_queries=args.worlds)
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


def _references_build(args: argparse.Namespace) -> int:
    from pytest_backintel.collect.references import build_locks

    if not rebound(args, "references build"):
        return 2
    done, problems = build_locks(
        [Path(p) for p in args.paths or ["."]],
        check=args.check,
        root=Path.cwd(),
        upgrade=args.check_upgrade,
    )
    for line in done:
        print(line)
    for line in problems:
        print(f"backintel references build: {line}", file=sys.stderr)
    if not done and not problems:
        print("no answerable scenarios bound to data of your own were found")
    if done and not problems:
        from pytest_backintel.run.probe_audit import unguarded_scenarios

        for line in unguarded_scenarios([Path(p) for p in args.paths or ["."]], Path.cwd()):
            print(f"backintel references build: {line}")
    return 1 if problems else 0


def _data_build(args: argparse.Namespace) -> int:
    from pytest_backintel.collect.worlds import data_dir, get_world

    world = get_world(args.world)
    files = world.ensure_built(data_dir(Path.cwd()), snapshot=args.snapshot)
    print(f"{args.world}: {files.parquet_dir} (data hash {world.data_hash(files)})")
    return 0


def _freeze_check(args: argparse.Namespace) -> int:
    """Refuse a candidate whose diff against the frozen baseline leaves the worker allowlist."""
    from pytest_backintel.freeze.allowlist import ALLOWLIST_FILE, AllowlistError, check_worker_diff

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
    p.add_argument(
        "--dataset",
        action="append",
        default=[],
        metavar="ALIAS=KIND:SOURCE",
        help="check the scenarios with a dataset alias rebound, as a run's --dataset does",
    )
    p.set_defaults(func=_validate)
    refs = sub.add_parser("references", help="references of your own suites").add_subparsers(
        dest="refs_cmd", required=True
    )
    p = refs.add_parser("build", help="compute references into the lock file beside scenarios")
    p.add_argument("paths", nargs="*", help="folders or files to search (default: .)")
    p.add_argument("--check", action="store_true", help="verify the lock files, write nothing")
    p.add_argument(
        "--check-upgrade",
        action="store_true",
        help="after an upgrade changed the data fingerprint: rebuild and say per scenario "
        "`unchanged` or `changed old -> new` (exit 1 on any change)",
    )
    p.add_argument(
        "--dataset",
        action="append",
        default=[],
        metavar="ALIAS=KIND:SOURCE",
        help="lock the references on another binding of a dataset alias too (as a run's "
        "--dataset rebinds it), beside the suite's own",
    )
    p.set_defaults(func=_references_build)
    data = sub.add_parser("data", help="datasets").add_subparsers(dest="data_cmd", required=True)
    p = data.add_parser("build", help="generate a world's Parquet and SQLite files")
    p.add_argument("--world", default="olist")
    p.add_argument("--snapshot", default="base", help="a named snapshot (e.g. tpch: sf1)")
    p.set_defaults(func=_data_build)
    p = sub.add_parser(
        "score", help="score one answer (JSON) for one case, many answers, or a whole run"
    )
    case = p.add_mutually_exclusive_group()
    case.add_argument("--case", help="scenario id")
    case.add_argument("--scenario", help="a scenario file (e.g. one of your own)")
    case.add_argument(
        "--run",
        help="a run folder: score every recorded answer again (exit 1 when one fails, or "
        "disagrees with its trial)",
    )
    case.add_argument(
        "--answers",
        metavar="FILE_OR_FOLDER",
        help='many answers in one process: a JSONL file, one {"case": ID, "answer": {...}} a '
        "line, or a folder of <case id>.json answers (exit 1 when one fails, 2 when one cannot "
        "be scored)",
    )
    p.add_argument(
        "--store",
        default="sqlite",
        help="store backend to re-execute evidence on (a scenario's own binding overrides it)",
    )
    p.add_argument(
        "--sandbox", default=None, help="sandbox backend for Python evidence (default as pytest)"
    )
    p.add_argument(
        "--dataset",
        action="append",
        default=[],
        metavar="ALIAS=KIND:SOURCE",
        help="score against another binding of a dataset alias (as a run's --dataset)",
    )
    p.add_argument("answer", nargs="?", help="the answer's JSON file")
    p.add_argument("--out", help="with --answers: write each answer's result (JSON) a line here")
    p.set_defaults(func=score_command)
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
    register_merge(sub)
    register_stores(sub)
    register_rewrite_imports(sub)
    register_serve_tools(sub)
    for command in sorted(entry_points(group=COMMANDS_GROUP), key=lambda ep: ep.name):
        command.load()(sub, {"data": data, "references": refs})
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except BrokenPipeError:  # `backintel score ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141  # 128 + SIGPIPE, as a shell reports it


if __name__ == "__main__":
    raise SystemExit(main())
