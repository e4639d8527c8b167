"""`backintel reserve ...`: the evaluator's commands for the sealed reserved split.

backintel reserve verify                       # the secret set reproduces the commitment
backintel reserve commit                       # re-issue it after a deliberate change
backintel reserve rotate --secret-out FILE [--used ID ...]   # retire, new secret
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["register"]


def _verify(args: argparse.Namespace) -> int:
    from scenarios.acceptance.sealing import unseal
    from scenarios.world_base import data_dir

    path, record = unseal(Path(args.commitment), data_dir())
    print(
        f"reserved suite {record['suite']}: secret id {record['secret_id']}, rotation "
        f"{record['rotation']}, {record['cases']} cases match their commitments; unsealed to "
        f"{path}"
    )
    return 0


def _commit(args: argparse.Namespace) -> int:
    from scenarios.acceptance.manifest import load_manifest
    from scenarios.acceptance.sealing import build_reserved, issue, read_secret, repeats

    secret = read_secret()
    with tempfile.TemporaryDirectory(prefix="backintel-commit-") as scratch:
        same = repeats(load_manifest("development"), build_reserved(secret, Path(scratch)))
        if same:
            print(
                "backintel reserve commit: this secret's variant repeats development values "
                f"({'; '.join(same)}); draw another with `backintel reserve rotate`",
                file=sys.stderr,
            )
            return 1
        data = issue(secret, Path(scratch), Path(args.commitment))
    sealed = data["sealed"]
    print(
        f"wrote {args.commitment}: {len(data['cases'])} cases, secret id {sealed['secret_id']}, "
        f"rotation {sealed['rotation']}; commit it"
    )
    return 0


def _rotate(args: argparse.Namespace) -> int:
    from scenarios.acceptance.rotation import rotate
    from scenarios.world_base import data_dir

    commitment = Path(args.commitment)
    retired = commitment.parent / "retired.json"
    done = rotate(args.used or None, Path(args.secret_out), data_dir(), commitment, retired)
    print(
        f"retired {len(done['retired'])} case(s) to {done['regression_manifest']}; rotation "
        f"{done['rotation']}, secret id {done['secret_id']} written to {done['secret_file']}; "
        f"commit {done['commitment']} and {done['regression_manifest']}, then declare that "
        "commit with --freeze-baseline on the next frozen run"
    )
    return 0


def _guarded(func: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        from pytest_backintel.collect.sealed import SealedSuiteError

        try:
            return int(func(args))
        except (SealedSuiteError, ValueError, OSError) as exc:
            print(f"backintel reserve {args.reserve_cmd}: {exc}", file=sys.stderr)
            return 1

    return run


def register(sub: Any, groups: dict[str, Any] | None = None) -> None:
    """Add `reserve verify|commit|rotate` to the `backintel` parser's subcommands."""
    # the commitment's default path without importing the builder (polars) at parse time
    commitment = Path(__file__).resolve().parent / "acceptance-v1" / "reserved.commitment.json"

    reserve = sub.add_parser("reserve", help="the sealed reserved split (evaluator only)")
    cmds = reserve.add_subparsers(dest="reserve_cmd", required=True)
    for name, func, text in (
        ("verify", _verify, "check the secret set against the committed commitment"),
        ("commit", _commit, "write the commitment of the secret set (after a deliberate change)"),
        ("rotate", _rotate, "retire used cases to regression; new secret and commitment"),
    ):
        p = cmds.add_parser(name, help=text)
        p.add_argument("--commitment", default=str(commitment), help="commitment file")
        p.set_defaults(func=_guarded(func))
        if name == "rotate":
            p.add_argument("--secret-out", required=True, help="new secret file, outside the repo")
            p.add_argument("--used", action="append", help="a used case id (default: all)")
