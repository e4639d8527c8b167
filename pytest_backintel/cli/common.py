"""What several `backintel` subcommands share: the checkout's root and `--dataset` rebinding."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["ROOT", "rebound"]

ROOT = Path(__file__).resolve().parents[2]
"""The checkout: where the shipped benchmark's scenarios and manifests live."""


def rebound(args: argparse.Namespace, command: str) -> bool:
    """Apply the command's `--dataset ALIAS=KIND:SOURCE` rebindings; False (said) if one is bad."""
    from pytest_backintel.collect.suites import rebind
    from pytest_backintel.options import parse_rebinding

    try:
        rebind(dict(parse_rebinding(d) for d in args.dataset), Path.cwd())
    except ValueError as exc:
        print(f"backintel {command}: {exc}", file=sys.stderr)
        return False
    return True
