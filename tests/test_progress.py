"""Live progress: one status line on a terminal, redrawn in place while items run (the trials
in flight, their elapsed time, requests and tokens) and erased before pytest writes; plain
lines elsewhere; nothing with `-q`."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import helpers
import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Status, StatusCode

from pytest_backintel.collect.loading import load_scenario_file
from pytest_backintel.records.live import LiveTrials, Running, status_line
from pytest_backintel.run.progress import eta_every, eta_line
from pytest_backintel.testing.model_server import ModelServer, Step

FEW = helpers.FEW
SAVE, ERASE = "\x1b7", "\x1b8\x1b[K"


def test_the_status_line_names_every_trial_in_flight_with_its_usage() -> None:
    running = [
        Running("l1-x/t1", started=88.0, requests=2, tokens=1300),
        Running("l2-y/t1", started=97.0, requests=1, tokens=40, unmetered=True),
        Running("l3-z[t1]", started=99.0, counted=False),
    ]
    line = status_line(running, now=100.0, width=200)
    parts = ["l1-x/t1 12s 2 req 1.3k tok", "l2-y/t1 3s 1 req 40+? tok", "l3-z[t1] 1s"]
    assert line == "backintel: 3 running: " + " | ".join(parts)
    cut = status_line(running, now=100.0, width=40)
    assert len(cut) == 40
    assert cut.endswith("…")
    assert status_line([], now=100.0, width=80) == ""


def test_trials_and_their_requests_are_counted_from_their_own_spans() -> None:
    live = LiveTrials(clock=lambda: 5.0)
    changes: list[int] = []
    live.on_change = lambda: changes.append(len(live.running()))
    provider = TracerProvider()
    live.attach(provider)
    live.attach(provider)  # once per provider, however often tracing starts
    tracer = provider.get_tracer("test")
    chat = {"gen_ai.operation.name": "chat"}
    with tracer.start_as_current_span(
        "backintel trial l1-x/t1", attributes={"backintel.case_key": "l1-x/t1"}
    ):
        for usage in ({"gen_ai.usage.input_tokens": 700, "gen_ai.usage.output_tokens": 7}, {}):
            with tracer.start_as_current_span("chat qwen3", attributes=chat | usage):
                pass
        with tracer.start_as_current_span("running tool", attributes={"gen_ai.tool.name": "x"}):
            pass
        other = tracer.start_span("chat qwen3", context=Context(), attributes=chat)
        other.set_attribute("gen_ai.usage.input_tokens", 5)
        other.end()  # a request of another trace is not this trial's
        (trial,) = live.running()
    assert (trial.case, trial.started, trial.requests, trial.tokens) == ("l1-x/t1", 5.0, 2, 707)
    assert trial.unmetered, "the second request reported no tokens"
    assert live.running() == []
    assert changes[0] == 1
    assert changes[-1] == 0
    provider.shutdown()


def test_a_model_request_starting_is_announced_before_it_is_sent() -> None:
    """`on_request` runs when a request span starts (the session's work that can wait, such
    as building probes, waits for it), not for the trial's span or a tool's."""
    live = LiveTrials()
    seen: list[bool] = []
    provider = TracerProvider()
    live.attach(provider)
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("backintel trial l1-x/t1"):
        live.on_request = lambda: seen.append(True)
        with tracer.start_as_current_span("running tool", attributes={"gen_ai.tool.name": "x"}):
            pass
        assert seen == [], "a tool's span is not a request"
        with tracer.start_as_current_span("chat m", attributes={"gen_ai.operation.name": "chat"}):
            assert seen == [True], "called when the request starts, not when it ends"
    live.on_request = None
    with tracer.start_as_current_span("chat m", attributes={"gen_ai.operation.name": "chat"}):
        pass  # nobody listening: nothing to call
    assert seen == [True]
    provider.shutdown()


def test_a_model_request_ending_is_announced_answered_or_failed() -> None:
    """`on_answer` runs when a request span ends, whatever its status (the session's work
    that can wait, such as building probes and importing the summary's libraries, waits for
    it, so it never shares the GIL with the first request on its way out)."""
    live = LiveTrials()
    seen: list[str] = []
    provider = TracerProvider()
    live.attach(provider)
    tracer = provider.get_tracer("test")
    live.on_answer = lambda: seen.append("answer")
    chat = {"gen_ai.operation.name": "chat"}
    with tracer.start_as_current_span("backintel trial l1-x/t1"):
        with tracer.start_as_current_span("running tool", attributes={"gen_ai.tool.name": "x"}):
            pass
        with tracer.start_as_current_span("chat m", attributes=chat):
            assert seen == [], "called when the request ends, not when it starts"
        assert seen == ["answer"]
        failed = tracer.start_span("chat m", attributes=chat)
        failed.set_status(Status(StatusCode.ERROR))
        failed.end()
    assert seen == ["answer", "answer"], "a failed request has left the process too"
    live.on_answer = None
    provider.shutdown()


def in_a_terminal(folder: Path, *args: str, columns: int = 160) -> str:
    """pytest run on a pseudo-terminal (`columns` wide): everything it wrote, escapes kept."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=folder,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env={**os.environ, "TERM": "xterm"},
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's last writer is gone
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=600)
    os.close(leader)
    return b"".join(chunks).decode("utf-8", "replace")


def script_two_requests(server: ModelServer, path: Path, delay_s: float = 0.0) -> None:
    scenario = load_scenario_file(path)
    metric = scenario.metrics[0].name if scenario.metrics else scenario.id
    first = Step.call("list_tables", usage=(700, 7), delay_s=delay_s)
    second = Step.call("list_tables", usage=(800, 8))
    server.script(f"`{metric}`" if scenario.metrics else scenario.question[:40], [first, second])


def drawn(out: str) -> list[str]:
    """Every status line drawn, in order."""
    return re.findall(r"\x1b7 (backintel: \d+ running: [^\x1b]*)\x1b8", out)


def test_on_a_terminal_one_status_line_shows_requests_and_tokens_and_is_erased(
    pytester: pytest.Pytester, model_server: ModelServer
) -> None:
    script_two_requests(model_server, FEW[0])
    model = ("--model", "openai:qwen3", "--model-base-url", model_server.url)
    results = f"--results-dir={pytester.path / 'results'}"
    out = in_a_terminal(pytester.path, str(FEW[0]), results, "-p", "no:xdist", *model)
    lines = [line for line in drawn(out) if "building world" not in line]  # worlds built ahead
    assert lines[0].startswith("backintel: 1 running: l1-item-grain/t1 ")
    assert any(re.fullmatch(r".* \d+s 1 req 707 tok", line) for line in lines), lines
    assert any(re.fullmatch(r".* \d+s 2 req 1.5k tok", line) for line in lines), lines
    assert out.count(SAVE) == out.count(ERASE), "every line drawn is erased again"
    assert all(ERASE in piece for piece in out.split(SAVE)[1:])
    assert "backintel: running scenario" not in out, "no plain start lines on a terminal"
    assert "backintel: l1-item-grain t1: " in out, "how each trial ended stays on screen"
    assert "backintel: pass rate by level" in out.split(SAVE)[-1]
    quiet = in_a_terminal(pytester.path, str(FEW[0]), results, "-p", "no:xdist", "-q", *model)
    assert SAVE not in quiet
    assert "running" not in quiet


def test_on_a_terminal_concurrent_trials_share_the_status_line(
    pytester: pytest.Pytester, model_server: ModelServer
) -> None:
    for path in FEW[:2]:
        script_two_requests(model_server, path, delay_s=2.0)  # both in flight together
    model = ("--model", "openai:qwen3", "--model-base-url", model_server.url)
    out = in_a_terminal(
        pytester.path,
        *map(str, FEW[:2]),
        f"--results-dir={pytester.path / 'results'}",
        "-p",
        "no:xdist",
        "--concurrency",
        "2",
        *model,
        columns=300,  # room for both after pytest's line (the long path of the first file)
    )
    both = [line for line in drawn(out) if line.startswith("backintel: 2 running: ")]
    assert both, drawn(out)
    cases = sorted(part.split(" ")[0] for part in both[-1].split(": ", 2)[2].split(" | "))
    assert cases == ["l1-item-grain/t1", "l1-orders-by-status/t1"]  # in the order they started
    assert out.count(SAVE) == out.count(ERASE)


@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2")], ids=["serial", "xdist"])
def test_off_a_terminal_one_line_per_item_and_nothing_stranded(
    pytester: pytest.Pytester, xdist: tuple[str, str]
) -> None:
    result = pytester.runpytest_subprocess(
        *map(str, FEW), f"--results-dir={pytester.path / 'results'}", *xdist
    )
    lines = result.stdout.lines
    items = [line for line in lines if re.search(r"\[\d+/\d+\]$", line)]
    assert len(items) == len(FEW), lines
    for line in items:
        assert re.fullmatch(
            r"\S+\.scenario\.yaml::\S+\[t1\] PASSED pass \d+\.\ds \d+ req \d+ tok \[\d+/\d+\]", line
        )
    assert not any(line.strip(". ") == "" and "." in line for line in lines), "a stranded dot"
    assert not any(line.rstrip().endswith(".yaml") for line in lines), "a stranded file name"
    assert "backintel: running scenario" not in result.stdout.str()
    assert SAVE not in result.stdout.str()
    verbose = pytester.runpytest_subprocess(
        str(FEW[0]), f"--results-dir={pytester.path / 'r2'}", "-p", "no:xdist", "-v"
    ).stdout.str()
    assert "PASSED" in verbose
    assert "backintel: l1-item-grain t1: pass in " in verbose


@pytest.mark.parametrize(
    ("done", "total", "elapsed", "shown"),
    [
        (10, 18, 8.0, "backintel: 10/18 items done in 8s, about 6s left"),
        (20, 131, 72.0, "backintel: 20/131 items done in 1m12s, about 6m40s left"),
    ],
)
def test_the_time_left_follows_the_pace_so_far(
    done: int, total: int, elapsed: float, shown: str
) -> None:
    assert eta_line(done, total, elapsed) == shown
    assert eta_every(131) == 14
    assert eta_every(18) == 10
