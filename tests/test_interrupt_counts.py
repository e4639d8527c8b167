"""A graceful stop (SIGINT, as Ctrl-C sends it) part-way through a real run: pytest's counts
and the records agree, with and without xdist, and the run's per-process folders are gone.
Real processes against the scripted OpenAI-compatible server, as a user runs them (issue 28).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from test_resume_retry import command, script

from pytest_backintel.testing.model_server import ModelServer

ROOT = Path(__file__).resolve().parents[1]
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?)\b")


def _summary(text: str) -> dict[str, int]:
    """pytest's final counts, from its last summary line."""
    lines = [line for line in text.splitlines() if line.startswith("=") and " in " in line]
    counts = {"passed": 0, "failed": 0, "skipped": 0, "error": 0}
    for number, word in _COUNT.findall(lines[-1] if lines else ""):
        counts[word.rstrip("s") if word.startswith("error") else word] += int(number)
    return counts


def _records(run_dir: Path) -> list[dict[str, Any]]:
    lines: list[str] = []
    merged = run_dir / "records.jsonl"
    if merged.exists():
        lines = merged.read_text().splitlines()
    else:
        for part in sorted((run_dir / "parts").glob("records-*.jsonl")):
            lines += part.read_text().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]


def _interrupt(cmd: list[str], run_dir: Path, data: Path, after: int) -> str:
    """Run `cmd`, send SIGINT to its process group once `after` records exist, return output."""
    env = os.environ | {"BACKINTEL_DATA_DIR": str(data)}
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while len(_records(run_dir)) < after and proc.poll() is None:
        assert time.monotonic() < deadline, "no trial finished"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group (xdist workers too)
    try:
        out, _ = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail("the interrupted run did not stop:\n" + out[-3000:])
    assert proc.returncode == 2, out[-3000:]  # pytest's "interrupted"
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data folder for both runs (the world is built once)."""
    return tmp_path_factory.mktemp("data")


@pytest.mark.parametrize("workers", [None, "2"], ids=["serial", "xdist"])
def test_sigint_mid_run_counts_agree_with_the_records(
    model_server: ModelServer, tmp_path: Path, data: Path, workers: str | None
) -> None:
    script(model_server, delay_s=0.3)
    cmd = command(model_server, tmp_path, "--run-id", "cut", "--trials", "4")
    if workers is not None:
        at = cmd.index("no:xdist")
        cmd = [*cmd[: at - 1], *cmd[at + 1 :], "-n", workers]
    out = _interrupt(cmd, tmp_path / "cut", data, after=3)
    counts = _summary(out)
    records = _records(tmp_path / "cut")
    by_outcome: dict[str, int] = {}
    for record in records:
        by_outcome[record["outcome"]] = by_outcome.get(record["outcome"], 0) + 1
    passed = by_outcome.get("pass", 0)
    failed = sum(n for o, n in by_outcome.items() if o not in ("pass", "interrupted", "not_run"))
    assert 3 <= len(records) < 12, (len(records), out[-2000:])
    assert counts["passed"] == passed, (counts, by_outcome, out[-2000:])
    assert counts["failed"] == failed, (counts, by_outcome, out[-2000:])
    # a graceful stop removes this run's per-process store and sandbox folders
    left = [p for p in (data / "stores").glob("*/*") if p.name.isdigit()]
    left += list((data / "sandbox").glob("*")) if (data / "sandbox").exists() else []
    assert left == [], left


def test_only_this_sessions_unreported_records_are_marked(tmp_path: Path) -> None:
    from pytest_backintel.records.interrupted import mark_unreported, part_lengths

    parts = tmp_path / "parts"
    parts.mkdir()
    earlier = {"nodeid": "a.yaml::x[1]", "outcome": "pass", "reasons": []}
    (parts / "records-gw0.jsonl").write_text(json.dumps(earlier) + "\n")
    before = part_lengths(tmp_path)  # a resumed session starts here
    mine = [
        {"nodeid": "a.yaml::y[1]", "outcome": "pass", "reasons": []},
        {"nodeid": "a.yaml::z[1]", "outcome": "wrong_value", "reasons": [{"outcome": "x"}]},
    ]
    with (parts / "records-gw0.jsonl").open("a") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in mine)
    (parts / "records-gw1.jsonl").write_text(json.dumps(earlier | {"nodeid": "b::q"}) + "\n")

    marked = mark_unreported(tmp_path, {"a.yaml::y[1]"}, before)
    assert marked == ["a.yaml::z[1]", "b::q"]
    rows = [json.loads(line) for line in (parts / "records-gw0.jsonl").read_text().splitlines()]
    assert rows[0] == earlier  # an earlier session's record is never touched
    assert rows[1]["outcome"] == "pass"  # pytest counted it
    assert rows[2]["outcome"] == "not_run"
    assert rows[2]["interrupted_outcome"] == "wrong_value"
    assert rows[2]["reasons"][0]["message"].startswith("the run was interrupted (SIGINT)")
    assert rows[2]["reasons"][1] == {"outcome": "x"}
