"""`backintel score --answers`: many hand-written answers scored in one process.

Each answer is scored exactly as `score --case` scores one (`HandScorer`), but the start-up,
the scenarios' discovery, the stores, probes and sandbox are paid once for the whole batch: a
script that scores a thousand answers pays them once, not a thousand times. A bad answer (not
JSON, an unknown case, not a contract answer, a store that fails) is reported with its
`file:line` and the others are still scored.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pytest_backintel.cli.common import ROOT

if TYPE_CHECKING:
    from pytest_backintel.evidence.reexecute import EvidenceResult
    from pytest_backintel.run.hand_score import HandScorer
    from pytest_backintel.scenario import Scenario
    from pytest_backintel.scoring.score import TrialScore

__all__ = ["CaseFinder", "read_answers", "score_json", "score_many"]

FORMAT = 'one JSON object per line: {"case": "<scenario id>", "answer": {<answer or refusal>}}'


class CaseFinder:
    """A case by id: the suites under the current folder, then the shipped benchmark's
    scenarios, then its acceptance manifests (with the manifest that holds the reference)."""

    def __init__(self, scenarios: dict[str, tuple[Path, Scenario]]) -> None:
        self.scenarios = scenarios

    @classmethod
    def here(cls) -> CaseFinder:
        """Raises `ScenarioFileError` for an invalid scenario file under the current folder."""
        from pytest_backintel.collect.loading import find_scenarios
        from pytest_backintel.collect.references import discover

        return cls({s.id: (p, s) for p, s in discover([Path.cwd()])} | find_scenarios())

    def find(self, case_id: str) -> tuple[Scenario, Path | None]:
        """The case's scenario and manifest (None for a scenario file); `LookupError` saying
        which ids come close for an unknown one."""
        from pytest_backintel.collect.manifests import find_manifest_case

        if case_id in self.scenarios:
            return self.scenarios[case_id][1], None
        found = find_manifest_case(ROOT, case_id)
        if found is not None:
            return found[1], found[0]
        close = difflib.get_close_matches(case_id, list(self.scenarios), n=3)
        raise LookupError(
            f"unknown case {case_id!r}." + (f" Did you mean {', '.join(close)}?" if close else "")
        )


def score_json(
    scenario: Scenario, store: str, score: TrialScore, evidence: list[EvidenceResult],
    scorer: HandScorer,
) -> dict[str, Any]:  # fmt: skip
    """What `backintel score` prints (and `--out` writes) for one scored answer."""
    return {
        "case": scenario.id,
        "store": store,
        "outcome": score.outcome.value,
        "reasons": [r.message for r in score.reasons],
        "evidence": [e.to_json() for e in evidence],
        "probe_gaps": scorer.probe_gaps,
        "probe_unguarded": scorer.probe_unguarded,
    }


def read_answers(source: Path) -> Iterator[tuple[str, Any]]:
    """(where, the case id and answer) of each answer, or (where, a `ValueError` saying what
    is wrong): the lines of a JSONL file (blank lines skipped), or the `<case id>.json` files of
    a folder (each one answer, as `score --case` reads it)."""
    if source.is_dir():
        for path in sorted(source.glob("*.json")):
            try:
                yield str(path), (path.stem, json.loads(path.read_bytes()))
            except ValueError as exc:
                yield str(path), ValueError(f"not JSON: {exc}")
        return
    with source.open(encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                yield f"{source}:{number}", _entry(line)


def _entry(line: str) -> tuple[str, Any] | ValueError:
    try:
        entry = json.loads(line)
    except ValueError as exc:
        return ValueError(f"not JSON: {exc}; expected {FORMAT}")
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get("case"), str)
        or "answer" not in entry
    ):
        got = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
        return ValueError(f"expected {FORMAT}; got {got}")
    return entry["case"], entry["answer"]


def _score_one(
    entry: tuple[str, Any], finder: CaseFinder, scorer: HandScorer, store: str
) -> dict[str, Any]:
    """One answer's result; `ValueError` (what is wrong) for one that cannot be scored."""
    import pytest
    from pydantic import ValidationError

    from pytest_backintel.collect.backends import store_spec
    from pytest_backintel.contract import parse_answer
    from stores.base import StoreError

    case_id, raw = entry
    try:
        scenario, manifest = finder.find(case_id)
    except LookupError as exc:
        raise ValueError(exc.args[0]) from None
    try:
        output = parse_answer(raw) if isinstance(raw, dict) else parse_answer(json.dumps(raw))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"{case_id}: not a contract answer: {problems}") from None
    try:
        score, evidence = scorer.score(scenario, output, manifest)
    except (pytest.UsageError, StoreError) as exc:
        raise ValueError(f"{case_id}: {exc}") from None
    return score_json(scenario, store_spec(scenario, store), score, evidence, scorer)


def score_many(args: argparse.Namespace) -> int:
    """Score every answer of `args.answers`; 0 when all pass, 1 when one fails, 2 when one
    could not be scored (each said with its `file:line`)."""
    from pytest_backintel.collect.loading import ScenarioFileError
    from pytest_backintel.collect.worlds import data_dir
    from pytest_backintel.run.hand_score import HandScorer
    from stores.base import StoreError

    source = Path(args.answers)
    if not source.exists():
        print(f"backintel score --answers: no {source} ({FORMAT}, or a folder of "
              "<case id>.json answers)", file=sys.stderr)  # fmt: skip
        return 2
    try:
        finder = CaseFinder.here()
    except ScenarioFileError as exc:
        print(f"{exc}\n(fix it, or score from another folder)", file=sys.stderr)
        return 2
    scorer = HandScorer(data_dir(Path.cwd()), store=args.store, sandbox=args.sandbox)
    try:
        if args.out:
            with Path(args.out).open("w", encoding="utf-8") as out:
                counts = _score_all(source, finder, scorer, args.store, out)
        else:
            counts = _score_all(source, finder, scorer, args.store, None)
    finally:
        try:
            scorer.close()
        except StoreError as exc:  # the scores stand; what is left, `backintel clean` removes
            print(f"backintel score: cleaning up: {exc}", file=sys.stderr)
    total = sum(counts.values())
    print(f"{total} answers: " + ", ".join(f"{n} {what}" for what, n in counts.items()))
    return 2 if counts["not scored"] else 1 if counts["fail"] else 0


def _score_all(
    source: Path, finder: CaseFinder, scorer: HandScorer, store: str, out: IO[str] | None
) -> dict[str, int]:
    """Score each answer of `source`, a line of result each (errors on stderr); the counts."""
    counts = {"pass": 0, "fail": 0, "not scored": 0}
    for where, entry in read_answers(source):
        try:
            if isinstance(entry, ValueError):
                raise entry
            result = _score_one(entry, finder, scorer, store)
        except ValueError as exc:
            counts["not scored"] += 1
            print(f"{where}: {exc}", file=sys.stderr)
            case = None if isinstance(entry, ValueError) else entry[0]
            result = {"case": case, "outcome": None, "error": str(exc)}
        else:
            passed = result["outcome"] == "pass"
            counts["pass" if passed else "fail"] += 1
            why = "" if passed else f" ({'; '.join(result['reasons'])[:300]})"
            print(f"{where}: {result['case']}: {result['outcome']}{why}", flush=True)
        if out is not None:
            out.write(json.dumps({"where": where, **result}, default=str) + "\n")
    return counts
