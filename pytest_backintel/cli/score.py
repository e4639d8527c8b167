"""`backintel score`: one hand-written answer scored against one scenario exactly as a trial
would score it, many in one process (`score_answers`), or every recorded answer of a run
scored again."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_backintel.cli.common import rebound

if TYPE_CHECKING:
    from pytest_backintel.scenario import Scenario

__all__ = ["score_command"]


def _run_finder(run: Path) -> Callable[[dict[str, Any]], tuple[Scenario, Path | None] | None]:
    """A record's scenario: its recorded file (with the run's `--dataset` rebindings), else
    the suites under the current folder, else the shipped benchmark."""
    from pytest_backintel.cli.score_answers import CaseFinder
    from pytest_backintel.collect.loading import find_scenarios, load_scenario_file
    from pytest_backintel.collect.references import discover
    from pytest_backintel.collect.suites import rebind
    from pytest_backintel.options import parse_rebinding
    from pytest_backintel.records.writer import read_json

    header = read_json(run / "run.json") if (run / "run.json").is_file() else {}
    rebinds = header.get("datasets") or {}  # sources as absolute paths or DSN variables
    rebind(dict(parse_rebinding(f"{a}={b}") for a, b in rebinds.items()), Path.cwd())
    finder: CaseFinder | None = None

    def find(record: dict[str, Any]) -> tuple[Scenario, Path | None] | None:
        nonlocal finder
        file = record.get("scenario_file")
        if file and Path(file).is_file():
            return load_scenario_file(Path(file)), None
        if finder is None:  # the suites here before the shipped benchmark
            finder = CaseFinder(
                find_scenarios() | {s.id: (p, s) for p, s in discover([Path.cwd()])}
            )
        try:
            return finder.find(str(record["scenario_id"]))
        except LookupError:
            return None

    return find


def _rescore(args: argparse.Namespace) -> int:
    """Score every recorded answer of a run again; fail on any outcome that differs."""
    from pytest_backintel.collect.loading import ScenarioFileError
    from pytest_backintel.collect.lockfile import LockError
    from pytest_backintel.collect.worlds import data_dir
    from pytest_backintel.records.writer import read_records
    from pytest_backintel.run.hand_score import HandScorer, rescore_run

    path = Path(args.run) / "records.jsonl"
    if not path.is_file():
        print(f"backintel score --run: no {path}", file=sys.stderr)
        return 2
    scorers: dict[str, HandScorer] = {}

    def scorer_for(store: str) -> HandScorer:
        if store not in scorers:
            scorers[store] = HandScorer(data_dir(Path.cwd()), store=store, sandbox=args.sandbox)
        return scorers[store]

    try:
        found = rescore_run(read_records(path), _run_finder(Path(args.run)), scorer_for)
    except (ScenarioFileError, LockError) as exc:
        print(f"backintel score --run: {exc}", file=sys.stderr)
        return 2
    finally:
        for scorer in scorers.values():
            scorer.close()
    scored, wrong, missing = found
    for line in wrong + missing:
        print(line, file=sys.stderr)
    failed = sum(o != "pass" for o in scored)
    print(
        f"{len(scored)} recorded answers scored again: {len(scored) - len(wrong)} agree with "
        f"the trial"
        + (f", {len(wrong)} disagree" if wrong else "")
        + (f"; {len(missing)} answer(s) of cases not found" if missing else "")
        + f"; {len(scored) - failed} pass, {failed} fail"
    )
    return 1 if wrong or missing or failed else 0


def score_command(args: argparse.Namespace) -> int:
    """Score one hand-written answer against one scenario, exactly as a trial would; many
    (`--answers`) in one process; or a whole run again (`--run`)."""
    import pytest
    from pydantic import ValidationError

    from pytest_backintel.cli.score_answers import CaseFinder, score_json, score_many
    from pytest_backintel.collect.backends import store_spec
    from pytest_backintel.collect.loading import ScenarioFileError, load_scenario_file
    from pytest_backintel.collect.worlds import data_dir
    from pytest_backintel.contract import parse_answer
    from pytest_backintel.run.hand_score import HandScorer
    from stores.base import StoreError

    if args.run:
        return _rescore(args)
    if not rebound(args, "score"):
        return 2
    if args.answers:
        return score_many(args)
    if not (args.case or args.scenario) or not args.answer:
        print(
            "backintel score: give --case or --scenario and an answer file, --answers, or --run",
            file=sys.stderr,
        )
        return 2
    if args.scenario is not None:
        scenario = load_scenario_file(Path(args.scenario))
        finder, args.case = CaseFinder({scenario.id: (Path(args.scenario), scenario)}), scenario.id
    else:  # the suites under the current folder, then the shipped benchmark
        try:
            finder = CaseFinder.here()
        except ScenarioFileError as exc:
            print(f"{exc}\n(fix it, or name the case's file with --scenario)", file=sys.stderr)
            return 2
    try:
        scenario, manifest = finder.find(args.case)
    except LookupError as exc:
        print(exc.args[0], file=sys.stderr)
        return 2
    try:
        output = parse_answer(Path(args.answer).read_bytes())
    except ValidationError as exc:
        print(f"{args.answer}: not a contract answer:\n{exc}", file=sys.stderr)
        return 2
    scorer = HandScorer(data_dir(Path.cwd()), store=args.store, sandbox=args.sandbox)
    try:
        score, evidence = scorer.score(scenario, output, manifest)
    except (pytest.UsageError, StoreError) as exc:
        print(f"backintel score: {exc}", file=sys.stderr)
        return 2
    finally:
        try:
            scorer.close()
        except StoreError as exc:  # the score stands; what is left, `backintel clean` removes
            print(f"backintel score: cleaning up: {exc}", file=sys.stderr)
    spec = store_spec(scenario, args.store)
    print(json.dumps(score_json(scenario, spec, score, evidence, scorer), indent=2, default=str))
    return 0 if score.outcome.passed else 1
