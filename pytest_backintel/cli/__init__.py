"""The `backintel` command: argument parsing and one handler per sub-command; it uses every
stage, nothing uses it."""

from pytest_backintel.cli.commands import build_parser, main

__all__ = ["build_parser", "main"]
