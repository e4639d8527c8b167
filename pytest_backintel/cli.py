"""The `backintel` command: schema, data and reference builds, and scoring one answer by hand."""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from pytest_backintel.contract import parse_answer
from pytest_backintel.loading import (
    SCHEMA_PATH,
    ScenarioFileError,
    find_scenarios,
    load_scenario_file,
    render_json_schema,
)
from pytest_backintel.manifests import find_manifest_case
from pytest_backintel.scenario import Scenario

__all__ = ["main"]

ROOT = SCHEMA_PATH.parent.parent


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
            load_scenario_file(Path(name))
        except ScenarioFileError as exc:
            print(exc, file=sys.stderr)
            bad += 1
    return 1 if bad else 0


def _data_build(args: argparse.Namespace) -> int:
    from scenarios.worlds import data_dir, get_world

    world = get_world(args.world)
    files = world.ensure_built(data_dir(), snapshot=args.snapshot)
    print(f"{args.world}: {files.parquet_dir} (data hash {world.data_hash(files)})")
    return 0


def _data_olist(args: argparse.Namespace) -> int:
    """Verify the public Olist CSV release against pinned checksums, then load it."""
    from scenarios.olist.real import OlistSourceError, load_real_olist, record_checksums
    from scenarios.worlds import data_dir

    src = Path(args.source)
    try:
        if args.record_checksums:
            digests = record_checksums(src)
            print(f"recorded {len(digests)} checksums; commit scenarios/olist/olist-release.sha256")
            return 0
        files = load_real_olist(src, data_dir())
    except (OlistSourceError, ValueError) as exc:
        print(f"backintel data olist: {exc}", file=sys.stderr)
        return 2
    print(f"olist-real: {files.parquet_dir} (run with BACKINTEL_OLIST_SOURCE=real)")
    return 0


def _replay_build(args: argparse.Namespace) -> int:
    from scenarios.replay import build_replay

    for name, files in sorted(build_replay().items()):
        print(f"olist-replay/{name}: {files.parquet_dir}")
    return 0


def _split_build(args: argparse.Namespace) -> int:
    from scenarios.split import build_split

    files = build_split()
    print(f"olist-split: {files.parquet_dir}")
    return 0


def _references_build(args: argparse.Namespace) -> int:
    from scenarios.references import ReferenceError, build_all

    try:
        build_all(write=not args.check)
    except ReferenceError as exc:
        print(f"backintel references build: {exc}", file=sys.stderr)
        return 1
    return 0


def _find_case(case_id: str) -> tuple[Scenario, Path | None] | None:
    scenarios = find_scenarios()
    if case_id in scenarios:
        return scenarios[case_id][1], None
    found = find_manifest_case(ROOT, case_id)
    return (found[1], found[0]) if found is not None else None


def _rescore(args: argparse.Namespace) -> int:
    """Score every recorded answer of a run again; fail on any outcome that differs."""
    from pytest_backintel.hand_score import HandScorer, rescore_run
    from pytest_backintel.records import read_records
    from scenarios.worlds import data_dir

    path = Path(args.run) / "records.jsonl"
    if not path.is_file():
        print(f"backintel score --run: no {path}", file=sys.stderr)
        return 2
    scorers: dict[str, HandScorer] = {}

    def scorer_for(store: str) -> HandScorer:
        if store not in scorers:
            scorers[store] = HandScorer(data_dir(), store=store, sandbox=args.sandbox)
        return scorers[store]

    try:
        scored, wrong = rescore_run(read_records(path), _find_case, scorer_for)
    finally:
        for scorer in scorers.values():
            scorer.close()
    for line in wrong:
        print(line, file=sys.stderr)
    print(f"{scored} recorded answers scored again: {scored - len(wrong)} agree with the trial")
    return 1 if wrong else 0


def _score(args: argparse.Namespace) -> int:
    """Score one hand-written answer against one scenario, exactly as a trial would."""
    import pytest

    from pytest_backintel.backends import store_spec
    from pytest_backintel.hand_score import HandScorer
    from scenarios.worlds import data_dir

    if args.run:
        return _rescore(args)
    if not args.case or not args.answer:
        print("backintel score: give --case and an answer file, or --run", file=sys.stderr)
        return 2
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
    scorer = HandScorer(data_dir(), store=args.store, sandbox=args.sandbox)
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
    p = data.add_parser("olist", help="verify and load the public Olist CSV release")
    p.add_argument("--from", dest="source", required=True, help="folder with the release CSVs")
    p.add_argument(
        "--record-checksums",
        action="store_true",
        help="pin the checksums of the files in --from (maintainers only)",
    )
    p.set_defaults(func=_data_olist)
    p = sub.add_parser("replay", help="ambient replay snapshots (level 6)")
    p.add_subparsers(dest="replay_cmd", required=True).add_parser(
        "build", help="write the Olist review snapshots"
    ).set_defaults(func=_replay_build)
    p = sub.add_parser("split", help="the cross-store split of Olist (level 4)")
    p.add_subparsers(dest="split_cmd", required=True).add_parser(
        "build", help="split Olist into olist_orders and olist_catalog"
    ).set_defaults(func=_split_build)
    refs = sub.add_parser("references", help="evaluator-owned references").add_subparsers(
        dest="refs_cmd", required=True
    )
    p = refs.add_parser("build", help="compute references with oracles, cross-check with SQL")
    p.add_argument("--check", action="store_true", help="verify without writing")
    p.set_defaults(func=_references_build)
    p = sub.add_parser("score", help="score one answer (JSON) for one case, or a whole run")
    p.add_argument("--case", help="scenario id")
    p.add_argument(
        "--run", help="a run folder: score every recorded answer again, fail on a disagreement"
    )
    p.add_argument(
        "--store",
        default="sqlite",
        help="store backend to re-execute evidence on (a scenario's own binding overrides it)",
    )
    p.add_argument(
        "--sandbox", default=None, help="sandbox backend for Python evidence (default as pytest)"
    )
    p.add_argument("answer", nargs="?", help="the answer's JSON file")
    p.set_defaults(func=_score)
    from reports.cli import register as register_reports

    register_reports(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
