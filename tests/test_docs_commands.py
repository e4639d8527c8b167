"""Every `uv run pytest …` and `uv run backintel …` command the README and docs show runs as
written, at least as far as its options and selection go.

pytest commands are collected (`--collect-only`) from the repository root with the same
environment assignments: an unknown option, a misspelt marker expression or a selection that
collects nothing fails here. backintel commands are parsed by the real argument parser. A
command that needs what a test machine has not (a provider key, the real Olist release) is
listed in `NOT_COLLECTED` with the test that covers it instead.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_backintel.cli.commands import build_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND = re.compile(r"^(?:[A-Z_]+=\S*\s+)*uv run (?:pytest|backintel)\b.*$")
PLACEHOLDERS = {
    "<run-id>": "example",
    "<baseline>": "example",
    "<candidate>": "example",
    "results/<run>": "results/example",
    "<id>": "l1-delivered-orders",
}
NO_PLUGINS = ["-p", "no:xdist", "-p", "no:syrupy"]
FROZEN = "needs the evaluator's secret and a clean tree; tests/test_freeze.py runs frozen runs"
NOT_COLLECTED: dict[str, str] = {
    "uv run pytest -m reserved --freeze": FROZEN,
    "uv run pytest -m development --analyst replay:results/rec": (
        "replays the run the command before it recorded; tests/test_replay_analyst.py records "
        "and replays"
    ),
    (
        'uv run pytest -m development -k item-grain --analyst "cmd:python '
        'examples/agents/pydantic_ai_agent.py" --model replay:results/agent-rec'
    ): (
        "replays the external agent's run the command before it recorded; "
        "tests/test_example_agents.py records and replays"
    ),
    "uv run pytest shop --run-id shop-agent": (
        "runs a suite folder of the user's own; tests/test_suite_analyst.py builds the page's "
        "suite file and runs this command on it"
    ),
    "uv run pytest -m development --resume <run-id>": (
        "finishes a run interrupted before; tests/test_resume_retry.py kills one and resumes it"
    ),
    "uv run pytest -m development --trials auto:0.1:results/base": (
        "plans its trials from a baseline run folder; tests/test_plan_review.py runs "
        "--trials auto on one"
    ),
    "uv run pytest -m development --retry-blocked <run-id>": (
        "runs again what an earlier run's outage blocked; tests/test_resume_retry.py does"
    ),
    **{
        f"uv run pytest -m development --model openai:gpt-5.1 --model "
        f"anthropic:claude-sonnet-4-5 --trials 2 --{flag} sweep": (
            "finishes a model matrix run before; tests/test_model_matrix.py kills one and "
            "resumes it, and retries what an outage blocked"
        )
        for flag in ("resume", "retry-blocked")
    },
}
"""Command (as written) -> why it is not collected here and which test runs it instead."""


def _candidates(text: str) -> list[tuple[int, str]]:
    """Code in a Markdown text by line: whole lines of code blocks, inline `spans` elsewhere."""
    found: list[tuple[int, str]] = []
    fenced, continued = False, False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced or line.startswith("    "):
            code = line.split("  #", 1)[0].strip()
            if continued:  # a shell line continued with a backslash
                found[-1] = (found[-1][0], found[-1][1][:-1].rstrip() + " " + code)
            else:
                found.append((number, code))
            continued = code.endswith("\\")
        else:
            found += [(number, span.strip()) for span in re.findall(r"`([^`]+)`", line)]
    return found


def _commands() -> list[tuple[str, str]]:
    return [
        (f"{doc.relative_to(ROOT)}:{number}", code)
        for doc in DOCS
        for number, code in _candidates(doc.read_text(encoding="utf-8"))
        if COMMAND.match(code)
    ]


COMMANDS = _commands()


def _split(command: str) -> tuple[dict[str, str], list[str]]:
    for placeholder, value in PLACEHOLDERS.items():
        command = command.replace(placeholder, value)
    words = shlex.split(command)
    env = {}
    while "=" in words[0] and words[0].split("=", 1)[0].isupper():
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    return env, words[2:]  # drop `uv run`


def _without_workers(args: list[str]) -> list[str]:
    """The arguments less `-n N` (collection needs no xdist workers)."""
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == "-n":
            skip = True
        elif not arg.startswith("-n") or arg.startswith("--"):
            kept.append(arg)
    return kept


def _into(arg: str, tmp_path: Path) -> str:
    """`--junitxml=F` / `--html=F` with the file moved into `tmp_path`."""
    for option in ("--junitxml=", "--html="):
        if arg.startswith(option):
            return option + str(tmp_path / Path(arg.removeprefix(option)).name)
    return arg


def test_the_docs_show_commands() -> None:
    assert len(COMMANDS) >= 10


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_a_documented_command_runs_as_written(where: str, command: str, tmp_path: Path) -> None:
    if command in NOT_COLLECTED:
        pytest.skip(NOT_COLLECTED[command])
    env, words = _split(command)
    if words[0] == "backintel":
        try:
            build_parser().parse_args(words[1:])
        except SystemExit as exc:
            pytest.fail(f"{where}: `{command}` does not parse (exit {exc.code})")
        return
    args = [_into(arg, tmp_path) for arg in _without_workers(words[1:])]
    results = ["--results-dir", str(tmp_path / "results")]  # nothing written into the repo
    done = subprocess.run(
        # syrupy fails a collect-only session for "unused" snapshots; xdist is not needed
        [sys.executable, "-m", "pytest", *args, "--collect-only", "-q", *NO_PLUGINS, *results],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"{where}: `{command}`\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    assert " collected" in done.stdout or "tests collected" in done.stdout, done.stdout[-500:]
