"""`backintel report RUN`, `backintel compare BASELINE CANDIDATE` and
`backintel view RUN [BASELINE]`.

`register(subparsers)` adds them to the `backintel` parser; `main(argv)` runs them alone.
Exit codes: report 0 (2 for an unreadable run folder); compare 0 when every shipped suite
accepts and no suite of your own is `worse` (`better` and `no detectable difference` are 0, so
a CI job gates on "not worse"), 1 for a reject or a `worse`, 2 refused (different scenario or
data hashes, an unreadable run folder or policy file); compare with three or more runs (every
pair, Holm's correction) 1 when a run is worse than the first; view 0 (2 for an unreadable run
folder, or a comparison refused: the run view is written all the same).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_backintel.records.prices import PriceTableError
from reports.decision_cli import register as register_decisions
from reports.load import RunFolderError, load_run

__all__ = ["build_parser", "main", "register"]

WITH_REVIEWS = (
    "use a person's overrides in the run's reviews.jsonl (backintel review); without it they "
    "are counted apart and the recorded outcomes are used"
)


def _loaded(path: str, with_reviews: bool) -> tuple[Any, str | None]:
    """A run folder, its reviews applied when asked, and the line saying what was done."""
    from reports.reviews import apply_reviews, review_note

    run = load_run(path)
    note = review_note(run, with_reviews)
    return (apply_reviews(run)[0] if with_reviews else run), note


def _report(args: argparse.Namespace) -> int:
    from reports.report import build_report  # altair, vl-convert, openpyxl: only when used

    try:
        files = build_report(Path(args.run), args.out, args.with_reviews)
    except (RunFolderError, PriceTableError) as exc:
        print(f"backintel report: {exc}", file=sys.stderr)
        return 2
    for banner in files.summary.run.banners:
        print(banner)
    if files.summary.reviews:
        print(files.summary.reviews)
    t = files.summary.overall
    rate = "n/a" if t.pass_rate is None else f"{t.pass_rate:.1%}"
    print(
        f"{files.summary.run.run_id}: {t.passed}/{t.attempted} attempted trials passed ({rate}), "
        f"{t.blocked} blocked, {t.not_run} not run"
    )
    ci = files.summary.intervals.get("pass_rate") or {}
    if ci.get("low") is not None:
        print(
            f"pass rate {ci['estimate']:.1%} [{ci['low']:.1%}, {ci['high']:.1%}] ({ci['method']})"
        )
    for path in (files.markdown, files.html, files.workbook, files.view.index, *files.leaderboard):
        print(f"wrote {path}")
    print(f"wrote {len(files.charts)} charts (SVG and PNG) in {files.markdown.parent / 'charts'}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from reports.compare import ComparisonRefused, compare_runs, render_comparison
    from reports.verdict import Policy, PolicyError, read_policy

    try:
        policy: Policy | str | None = args.policy
        if args.policy not in (None, "acceptance"):
            policy = read_policy(Path(args.policy))
        if args.others:
            return _compare_many(args, policy)
        (baseline, before), (candidate, after) = (
            _loaded(args.baseline, args.with_reviews),
            _loaded(args.candidate, args.with_reviews),
        )
        result = compare_runs(
            baseline,
            candidate,
            policy=policy,
            across_bindings=args.across_bindings,
        )
    except (RunFolderError, ComparisonRefused, PolicyError) as exc:
        print(f"backintel compare: {exc}", file=sys.stderr)
        return 2
    print(render_comparison(result), end="")
    for note in (before, after):
        if note:
            print(note)
    return 0 if result.ok else 1


def _compare_many(args: argparse.Namespace, policy: object) -> int:
    """Three or more runs: every pair with Holm's correction (`reports.pairwise`)."""
    from reports.pairwise import compare_many, render_pairwise
    from reports.verdict import DEFAULT_ALPHA, Policy

    alpha = policy.alpha if isinstance(policy, Policy) else DEFAULT_ALPHA
    loaded = [_loaded(p, args.with_reviews) for p in (args.baseline, args.candidate, *args.others)]
    result = compare_many([run for run, _ in loaded], alpha, args.across_bindings)
    print(render_pairwise(result), end="")
    for _, note in loaded:
        if note:
            print(note)
    return 0 if result.ok else 1


def _view(args: argparse.Namespace) -> int:
    from reports.charts import render_charts  # altair, vl-convert: only when used
    from reports.summary import summarize
    from reports.view import write_view

    try:
        run = load_run(args.run)
        baseline = load_run(args.baseline) if args.baseline else None
        summary = summarize(run)
        charts = render_charts(summary, run.path / "charts")
        site = write_view(run, baseline, Path(args.out) if args.out else None, summary, charts)
    except (RunFolderError, PriceTableError) as exc:
        print(f"backintel view: {exc}", file=sys.stderr)
        return 2
    for banner in run.banners:
        print(banner)
    print(f"wrote {site.index} ({site.trials} trials; open it in a browser, no server needed)")
    if site.refused:
        print(f"backintel view: comparison refused: {site.refused}", file=sys.stderr)
        return 2
    return 0


def register(subparsers: Any, groups: dict[str, Any] | None = None) -> None:
    """Add `report`, `compare` and `view` to the `backintel` subcommands (an
    `add_subparsers()` result)."""
    p = subparsers.add_parser("report", help="scorecard (md, html), charts and workbook for a run")
    p.add_argument("run", help="a run folder, results/<run-id>")
    p.add_argument("--out", default=None, help="write here instead of into the run folder")
    p.add_argument("--with-reviews", action="store_true", help=WITH_REVIEWS)
    p.set_defaults(func=_report)
    p = subparsers.add_parser(
        "compare", help="accept or reject a candidate run against a baseline run"
    )
    p.add_argument("baseline", help="the baseline run folder")
    p.add_argument("candidate", help="the candidate run folder")
    p.add_argument(
        "others",
        nargs="*",
        help="more candidate run folders: every pair is compared, with Holm's correction",
    )
    p.add_argument(
        "--policy",
        default=None,
        help="decide your own suites by this YAML file ({mandatory: [ids], controls: [ids], "
        "alpha: 0.05}) instead of their suite files' `policy`, or `acceptance` for the "
        "shipped promotion policy (accept/reject)",
    )
    p.add_argument(
        "--across-bindings",
        action="store_true",
        help="pair the same scenarios run over different data (another dataset binding)",
    )
    p.add_argument("--with-reviews", action="store_true", help=WITH_REVIEWS)
    p.set_defaults(func=_compare)
    p = subparsers.add_parser(
        "view", help="a static site of every trial of a run, beside a baseline run if given"
    )
    p.add_argument("run", help="a run folder, results/<run-id>")
    p.add_argument("baseline", nargs="?", default=None, help="a baseline run folder to compare")
    p.add_argument("--out", default=None, help="write here instead of <run>/view/")
    p.set_defaults(func=_view)
    register_decisions(subparsers)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="backintel", description=__doc__)
    register(parser.add_subparsers(dest="command", required=True))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
