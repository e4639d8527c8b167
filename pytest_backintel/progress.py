"""Progress lines while scenario items run: which case starts, and how it ended.

`backintel: running <case> [t<trial>]` when an item starts and `backintel: <case>: <outcome>
in <s>s, <n> requests, <m> tokens` when it ends, as plain lines (so a slow model never means
minutes of silence, in a terminal or a CI log). With `-q` nothing is printed. Under xdist
the controller prints them from its workers' reports: the figures travel on the report as
`report.backintel` (a plain dict, so xdist serializes it).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from pytest_backintel.html_report import RECORD_KEY

__all__ = ["Progress", "progress_line"]

_DONE_KEY = pytest.StashKey[bool]()


def progress_line(info: dict[str, Any]) -> str:
    """The line for a finished trial (tokens `unknown` when the provider reported none)."""
    tokens = info.get("tokens")
    shown = "unknown" if tokens is None else str(tokens)
    latency = info.get("latency_s") or 0.0
    return (
        f"backintel: {info['case']}: {info['outcome']} in {latency:.1f}s, "
        f"{info.get('requests') or 0} requests, {shown} tokens"
    )


def _info(record: dict[str, Any]) -> dict[str, Any]:
    usage = record.get("usage") or {}
    known = usage.get("tokens_reported", True)
    tokens = (usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0)
    return {
        "case": f"{record['scenario_id']} t{record['trial']}",
        "outcome": record["outcome"],
        "latency_s": record.get("latency_s"),
        "requests": usage.get("requests", 0),
        "tokens": tokens if known else None,
    }


class Progress:
    """Registered by the plugin; prints only in the process that owns the terminal."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.quiet = config.option.verbose < 0
        self.is_worker = hasattr(config, "workerinput")

    def _write(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None and not self.quiet and not self.is_worker:
            if reporter._tw.width_of_current_line:  # after pytest's own progress dots
                reporter.write("\n")
            reporter.write_line(line)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, None]:
        outcome = yield
        record = item.stash.get(RECORD_KEY, None)
        report: pytest.TestReport = outcome.get_result()
        if record is not None and not item.stash.get(_DONE_KEY, False):
            item.stash[_DONE_KEY] = True
            report.backintel = _info(record)  # type: ignore[attr-defined]

    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        if not location[0].endswith(".py"):
            self._write(f"backintel: running {location[2]}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        info = getattr(report, "backintel", None)
        if isinstance(info, dict):
            self._write(progress_line(info))
