"""Progress while scenario items run: which cases are in flight, and how each one ended.

On a terminal, one status line (`backintel: 2 running: l1-x/t1 12s 2 req 1.3k tok | ...`,
from `pytest_backintel.records.live`) is redrawn in place while items run and erased before pytest
writes its own output, and `backintel: <case>: <outcome> in <s>s, <n> requests, <m> tokens`
stays when a trial ends. Elsewhere (a CI log, a pipe) each item is one line, as `-v` would give
it, with its figures (`<id> PASSED pass 0.4s 5 req 1294 tok [3/18]`), pytest's own progress dot
for it is not written (nothing is stranded on a line of its own), and every tenth of the run a
line says how many items are done and about how long the rest will take. With `-v` pytest's
line stays and the figures follow it; with `-q` nothing of ours is printed. Under xdist the
controller prints them from its workers' reports: the figures travel on the report as
`report.backintel` (a plain dict, so xdist serializes it), and its status line shows the
items its workers run, with their elapsed time.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Generator
from typing import Any, TextIO

import pytest

from pytest_backintel.records.html_report import RECORD_KEY
from pytest_backintel.records.live import LiveLine, LiveTrials, Running

__all__ = ["Progress", "eta_line", "item_line", "progress_line"]

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


def item_line(nodeid: str, word: str, info: dict[str, Any], done: int, total: int) -> str:
    """One finished item off a terminal: `<id> PASSED pass 0.4s 5 req 1294 tok [3/18]`."""
    tokens = info.get("tokens")
    return (
        f"{nodeid} {word} {info['outcome']} {info.get('latency_s') or 0.0:.1f}s "
        f"{info.get('requests') or 0} req {'?' if tokens is None else tokens} tok [{done}/{total}]"
    )


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def eta_line(done: int, total: int, elapsed: float) -> str:
    """`backintel: 20/131 items done in 1m12s, about 6m40s left` (from the pace so far)."""
    left = elapsed / done * (total - done) if done else 0.0
    return (
        f"backintel: {done}/{total} items done in {_duration(elapsed)}, "
        f"about {_duration(left)} left"
    )


def eta_every(total: int) -> int:
    """How many items between two time-left lines: a tenth of the run, at least 10."""
    return max(10, math.ceil(total / 10))


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


MIN_COLUMNS = 30
"""Room the status line needs after pytest's current line (else it starts a line of its own)."""


def _terminal(config: pytest.Config, reporter: Any) -> TextIO | None:
    """Our own handle on the terminal, when pytest writes to one and live output fits."""
    if reporter is None or config.option.capture == "no" or config.getini("log_cli"):
        return None
    stream = getattr(reporter._tw, "_file", None)
    try:
        if stream is None or not stream.isatty() or os.environ.get("TERM") == "dumb":
            return None
        return os.fdopen(os.dup(stream.fileno()), "w", encoding="utf-8", errors="replace")
    except (OSError, ValueError, AttributeError):  # a stream without a file descriptor
        return None


class Progress:
    """Registered by the plugin; prints only in the process that owns the terminal."""

    def __init__(self, config: pytest.Config, live: LiveTrials) -> None:
        self.config = config
        self.quiet = config.option.verbose < 0
        self.is_worker = hasattr(config, "workerinput")
        self.trials = live
        self.started: dict[str, Running] = {}
        """Items started on xdist workers (the controller sees no spans of theirs)."""
        self.line: LiveLine | None = None
        self._out: TextIO | None = None
        self.plain = False
        """Off a terminal, not verbose: one line per item of ours instead of pytest's dot."""
        self.done = 0
        self.began = time.monotonic()

    @property
    def reporter(self) -> Any:
        return self.config.pluginmanager.get_plugin("terminalreporter")

    def _write(self, line: str) -> None:
        reporter = self.reporter
        if reporter is not None and not self.quiet and not self.is_worker:
            if reporter._tw.width_of_current_line:  # after pytest's own progress dots
                reporter.write("\n")
            reporter.write_line(line)

    # -- the live line ---------------------------------------------------------------------
    def pytest_sessionstart(self) -> None:
        if self.quiet or self.is_worker:
            return
        self._out = _terminal(self.config, self.reporter)
        if self._out is not None:
            self.line = LiveLine(self._out, self._running, self._columns)
            self.trials.on_change = self.line.refresh
        elif self.reporter is not None and self.config.option.verbose == 0:
            self.plain = True
            self.reporter.showfspath = False  # no file name line to strand the items' lines
        self.began = time.monotonic()

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: pytest.TestReport) -> tuple[str, str, str] | None:
        """Off a terminal our own line stands for the item: pytest writes no dot for it."""
        if not self.plain or not isinstance(getattr(report, "backintel", None), dict):
            return None
        category = "passed" if report.passed else "failed" if report.failed else "skipped"
        return category, "", ""

    def _running(self) -> list[Running]:
        now = time.monotonic()
        side = [
            Running(f"building {what}", now - s, counted=False)
            for what, s in self.trials.side_work()
        ]
        return sorted(
            [*self.trials.running(), *self.started.values(), *side], key=lambda r: r.started
        )

    def _columns(self) -> int:
        """Columns left after pytest's current line (the terminal's size read from our own
        descriptor: pytest's capture redirects standard output while items run)."""
        assert self._out is not None
        try:
            width = os.get_terminal_size(self._out.fileno()).columns
        except OSError:
            width = 80
        return width - int(self.reporter._tw.width_of_current_line) - 2  # a space, one spare

    def _show(self) -> None:
        if self.line is None:
            return
        reporter = self.reporter
        reporter._tw.flush()
        if self._columns() < MIN_COLUMNS:
            reporter.write("\n")
            reporter._tw.flush()
        self.line.show()

    def _hide(self) -> None:
        if self.line is not None:
            self.line.hide()

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_logstart(
        self, nodeid: str, location: tuple[str, int | None, str]
    ) -> Generator[None, None, None]:
        self._hide()
        if self.line is None and not self.plain and not location[0].endswith(".py"):
            self._write(f"backintel: running {location[2]}")
        yield
        if self.line is not None and self.config.pluginmanager.has_plugin("dsession"):
            case = nodeid.rsplit("::", 1)[-1]
            self.started[nodeid] = Running(case, time.monotonic(), counted=False)
        self._show()

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Generator[None, None, None]:
        self._hide()
        info = getattr(report, "backintel", None)
        if isinstance(info, dict) and self.plain:
            self._plain_line(report, info)
        elif isinstance(info, dict):
            self._write(progress_line(info))
        yield
        self._show()

    def _plain_line(self, report: pytest.TestReport, info: dict[str, Any]) -> None:
        self.done += 1
        session = getattr(self.reporter, "_session", None)
        total = max(int(getattr(session, "testscollected", 0) or 0), self.done)
        word = "PASSED" if report.passed else "FAILED" if report.failed else "SKIPPED"
        self._write(item_line(report.nodeid, word, info, self.done, total))
        if self.done % eta_every(total) == 0 and self.done < total:
            self._write(eta_line(self.done, total, time.monotonic() - self.began))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_logfinish(self, nodeid: str) -> Generator[None, None, None]:
        self._hide()
        self.started.pop(nodeid, None)
        yield
        self._show()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        self.close()

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self) -> None:
        self.close()

    @pytest.hookimpl(tryfirst=True)
    def pytest_internalerror(self) -> None:
        self.close()

    def close(self) -> None:
        """Erase the line for good (before pytest's summary or an error is written)."""
        line, self.line = self.line, None
        if line is not None:
            self.trials.on_change = None
            line.close()
        if self._out is not None:
            self._out.close()
            self._out = None

    # -- per item ----------------------------------------------------------------------------
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
