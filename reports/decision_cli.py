"""`backintel plan` (how many trials a paired comparison needs) and `backintel review` (a
person's override of one trial, appended to the run's `reviews.jsonl`).

Exit codes: 0 done; 2 for an unusable baseline, value or run folder (the message names it).
Nothing heavy is imported until a command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["register"]


def _plan(args: argparse.Namespace) -> int:
    from pytest_backintel.records.power import PlanError, baseline_outcomes, make_plan

    try:
        plan = make_plan(
            baseline_outcomes(Path(args.baseline)), args.effect, args.power, args.alpha
        )
    except PlanError as exc:
        print(f"backintel plan: {exc}", file=sys.stderr)
        return 2
    print("\n".join(plan.lines(args.budget)))
    return 0


def _review(args: argparse.Namespace) -> int:
    from reports.load import RunFolderError, load_run
    from reports.reviews import ReviewError, append_review, git_author

    try:
        run = load_run(args.run)
        review = append_review(
            run, args.case_key, args.outcome, args.reason, args.author or git_author()
        )
    except (RunFolderError, ReviewError) as exc:
        print(f"backintel review: {exc}", file=sys.stderr)
        return 2
    print(
        f"{review['case_key']}: {review['previous']} -> {review['effective']} "
        f"(reviewed {review['outcome']} by {review['author']}: {review['reason']}); "
        f"appended to {run.path / 'reviews.jsonl'}; records.jsonl unchanged"
    )
    return 0


def register(subparsers: Any) -> None:
    """Add `plan` and `review` to the `backintel` subcommands."""
    p = subparsers.add_parser(
        "plan", help="how many trials per case a paired comparison needs to detect an effect"
    )
    p.add_argument("--baseline", required=True, help="the baseline run folder, results/<run-id>")
    p.add_argument(
        "--effect", type=float, required=True, help="the difference in pass rate to detect"
    )
    p.add_argument("--power", type=float, default=0.8, help="chance to detect it (default 0.8)")
    p.add_argument("--alpha", type=float, default=0.05, help="two-sided level (default 0.05)")
    p.add_argument(
        "--budget", type=int, default=None, help="trials per run you can afford: what it detects"
    )
    p.set_defaults(func=_plan)
    p = subparsers.add_parser(
        "review", help="override one trial's outcome by a person's review (kept apart)"
    )
    p.add_argument("run", help="the run folder, results/<run-id>")
    p.add_argument("case_key", help="scenario-id/tN (or the scenario id of a one-trial case)")
    p.add_argument("--outcome", required=True, choices=["pass", "fail"])
    p.add_argument("--reason", required=True, help="why the recorded outcome is overridden")
    p.add_argument("--author", default=None, help="who reviews (default: git config user.name)")
    p.set_defaults(func=_review)
