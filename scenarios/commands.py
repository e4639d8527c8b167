"""The shipped benchmark's own `backintel` subcommands: building its worlds and references.

Registered through the `backintel.commands` entry-point group (`register(subparsers)`), as any
suite's commands would be; the harness's command line never imports this package.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["register"]


def _data_olist(args: argparse.Namespace) -> int:
    """Verify the public Olist CSV release against pinned checksums, then load it."""
    from scenarios.olist.real import OlistSourceError, load_real_olist, record_checksums
    from scenarios.world_base import data_dir

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
    from scenarios.replay.world import build_replay

    for name, files in sorted(build_replay().items()):
        print(f"olist-replay/{name}: {files.parquet_dir}")
    return 0


def _split_build(args: argparse.Namespace) -> int:
    from scenarios.split.world import build_split

    files = build_split()
    print(f"olist-split: {files.parquet_dir}")
    return 0


def _references_build(args: argparse.Namespace) -> int:
    from scenarios.acceptance.moves import acceptance_seed
    from scenarios.references import REBUILD_HINT, ReferenceError, build_all
    from scenarios.world_base import data_dir

    try:
        build_all(write=not args.check)
    except ReferenceError as exc:
        print(f"backintel references benchmark: {exc}", file=sys.stderr)
        return 1
    if (why := acceptance_seed(not args.check, data_dir())) is not None:
        print(
            f"backintel references benchmark: {why} (the moving-probe search results a fresh "
            f"clone starts from); {REBUILD_HINT}",
            file=sys.stderr,
        )
        return 1
    return 0


def register(sub: Any, groups: dict[str, Any]) -> None:
    """Add the benchmark's subcommands; `groups` holds the harness's shared subcommand groups
    (`data`, `references`), so `backintel data olist` sits beside `backintel data build`
    and `backintel references benchmark` beside `backintel references build`."""
    p = groups["data"].add_parser("olist", help="verify and load the public Olist CSV release")
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
    p = groups["references"].add_parser(
        "benchmark", help="the shipped benchmark's references: oracles cross-checked with SQL"
    )
    p.add_argument("--check", action="store_true", help="verify without writing")
    p.set_defaults(func=_references_build)
