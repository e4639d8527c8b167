"""A model run killed with SIGKILL part-way is finished by `--resume`; an outage's blocked
trials are scored by `--retry-blocked`, each keeping its failed attempt. Real processes against
the scripted OpenAI-compatible server, as a user runs them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_backintel.collect.loading import find_scenarios
from pytest_backintel.testing.model_server import ModelServer, Step
from reports.compare import compare_runs, render_comparison
from reports.load import load_run
from reports.scorecard import scorecard_context
from reports.summary import summarize

ROOT = Path(__file__).resolve().parents[1]
CASES = ("l1-delivered-orders", "l1-canceled-orders-2018", "l1-average-review-score")
EXPECTED = {CASES[0]: "pass", CASES[1]: "wrong_value", CASES[2]: "pass"}


def script(server: ModelServer, delay_s: float = 0.0) -> None:
    """list_tables, run_sql with the case's check query, its answer (the second case's off by
    one, so the run has a failure as well as passes)."""
    refs = json.loads((ROOT / "scenarios" / "references" / "olist.json").read_text())
    for case in CASES:
        _, scenario = find_scenarios()[case]
        (metric,) = scenario.metrics
        value = refs["references"][case]["values"][metric.name] + (case == CASES[1])
        evidence = {"id": "e1", "kind": "sql", "code": scenario.check_sql, "metrics": [metric.name]}
        server.script(
            f"`{metric.name}`",
            [
                Step.call("list_tables", delay_s=delay_s),
                Step.call("run_sql", {"sql": scenario.check_sql}, delay_s=delay_s),
                Step.answer(
                    [{"name": metric.name, "value": value, "unit": metric.unit}], [evidence]
                ),
            ],
        )


def command(server: ModelServer, results: Path, *args: str) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "-m", "development", "-k", " or ".join(CASES)]
    cmd += ["-p", "no:xdist", "-p", "no:cacheprovider", "--model", "openai:qwen3"]
    return [*cmd, "--model-base-url", server.url, f"--results-dir={results}", *args]


def run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    return done


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]


def part_lines(run_dir: Path) -> list[str]:
    path = run_dir / "parts" / "records-main.jsonl"
    return path.read_text().splitlines() if path.exists() else []


def _settled(server: ModelServer, quiet_s: float = 0.5) -> int:
    """The server's request count once nothing a killed process sent is still being handled."""
    count = len(server.requests)
    while True:
        time.sleep(quiet_s)
        if len(server.requests) == count:
            return count
        count = len(server.requests)


def test_a_run_killed_part_way_is_finished_by_resume(
    model_server: ModelServer, tmp_path: Path
) -> None:
    script(model_server, delay_s=0.15)
    trials = ["--trials", "3"]  # 9 trials, four in flight at once (auto for a model)
    run(command(model_server, tmp_path, "--run-id", "whole", *trials))
    whole = {r["nodeid"]: r["outcome"] for r in records(tmp_path / "whole")}
    assert len(whole) == 9
    assert {n.split("::")[1].split("[")[0]: o for n, o in whole.items()} == EXPECTED

    proc = subprocess.Popen(
        command(model_server, tmp_path, "--run-id", "cut", *trials),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while len(part_lines(tmp_path / "cut")) < 3 and proc.poll() is None:
        assert time.monotonic() < deadline, "no trial finished"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the process we started, and its children
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    cut_dir = tmp_path / "cut"
    assert not (cut_dir / "records.jsonl").exists(), "killed: the session never finished"
    finished = len([line for line in part_lines(cut_dir) if line.endswith("}")])
    assert 3 <= finished < 9, "killed part-way"
    requests_before = _settled(model_server)

    run(command(model_server, tmp_path, "--resume", "cut", *trials))
    resumed = records(cut_dir)
    assert len(resumed) == 9, "the merged record count equals the plan"
    assert len({r["nodeid"] for r in resumed}) == 9, "no trial twice"
    assert {r["nodeid"]: r["outcome"] for r in resumed} == whole, "as the uninterrupted run"
    header = json.loads((cut_dir / "run.json").read_text())
    assert sorted(header["planned_items"]) == sorted(whole)
    (entry,) = header["resumed"]
    assert entry["mode"] == "resume"
    assert entry["records_before"] + entry["missing_before"] == 9
    assert entry["records_after"] == 9
    ran_again = 9 - entry["records_before"]
    assert len(model_server.requests) - requests_before == 3 * ran_again, "finished never re-run"
    assert compare_runs(load_run(tmp_path / "whole"), load_run(cut_dir)).no_change

    # resuming again finds nothing to run; another model setting is refused, named
    requests_before = len(model_server.requests)
    again = subprocess.run(
        command(model_server, tmp_path, "--resume", "cut", *trials),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert again.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, again.stdout[-2000:]
    assert "--resume cut: nothing to run, every planned trial has a final record" in again.stdout
    assert len(records(cut_dir)) == 9
    assert len(model_server.requests) == requests_before
    other = subprocess.run(
        command(model_server, tmp_path, "--resume", "cut", "--trials", "3", "--max-requests", "5"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert other.returncode == 4
    assert "limits was {" in other.stderr
    assert "'max_requests': 30" in other.stderr
    assert "'max_requests': 5" in other.stderr


def test_retry_blocked_scores_what_an_outage_blocked(
    model_server: ModelServer, tmp_path: Path
) -> None:
    script(model_server)
    # the first half of the run meets an outage: 3 trials x 4 attempts answered HTTP 500
    model_server.fail_next(12)
    serial = ["--trials", "2", "--concurrency", "1", "--max-provider-failures", "10"]
    run(command(model_server, tmp_path, "--run-id", "outage", *serial))
    run_dir = tmp_path / "outage"
    first = {r["nodeid"]: r for r in records(run_dir)}
    blocked = sorted(n for n, r in first.items() if r["outcome"] == "provider_error")
    assert len(blocked) == 3, [r["outcome"] for r in first.values()]
    assert summarize(load_run(run_dir)).overall.blocked == 3
    requests_before = len(model_server.requests)

    done = run(command(model_server, tmp_path, "--retry-blocked", "outage", *serial))
    assert "--retry-blocked outage: 3 of 6 planned trial(s) to run (3 blocked" in done.stdout
    after = {r["nodeid"]: r for r in records(run_dir)}
    assert set(after) == set(first), "one record per trial"
    assert len(model_server.requests) - requests_before == 3 * 3, "only the blocked ran again"
    for nodeid, record in after.items():
        case = record["scenario_id"]
        assert record["outcome"] == EXPECTED[case], "every trial scored"
        if nodeid in blocked:
            assert record["attempt"] == 2
            (failed,) = record["attempts"]
            assert failed["outcome"] == "provider_error"
            assert failed["trace_id"] == first[nodeid]["trace_id"], "the very attempt kept"
            assert [r["status"] for r in failed["provider_retries"]] == [500] * 4
        else:  # a scored outcome is never re-rolled
            assert record == first[nodeid]
    header = json.loads((run_dir / "run.json").read_text())
    assert header["retried"] == 3
    assert header["resumed"][0]["mode"] == "retry_blocked"
    assert header["resumed"][0]["blocked_before"] == 3
    loaded = load_run(run_dir)
    assert (loaded.retried, summarize(loaded).overall.blocked) == (3, 0)
    line = scorecard_context(summarize(loaded), [])["overall_line"]
    assert "3 trial(s) retried after a blocked attempt" in line
    text = render_comparison(compare_runs(loaded, loaded))
    assert "6 trials, 3 retried after a blocked attempt" in text


def test_resume_of_a_run_that_does_not_exist_is_a_usage_error(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "pytest", "-m", "development", "-k", CASES[0], "-p", "no:xdist"]
    done = subprocess.run(
        [*cmd, f"--results-dir={tmp_path}", "--resume", "nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 4
    assert f"--resume nope: no run folder {tmp_path / 'nope'} with a run.json" in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--resume", "a", "--retry-blocked", "a"], "give --resume or --retry-blocked, not both"),
        (["--resume", "a", "--run-id", "b"], "--resume a appends to that run's own folder"),
        (["--retry-blocked", "a", "--append-run"], "--retry-blocked a appends to that run's"),
    ],
)
def test_conflicting_run_options_are_refused(
    pytester: pytest.Pytester, args: list[str], message: str
) -> None:
    result = pytester.runpytest("-p", "no:xdist", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_a_retry_supersedes_its_earlier_attempts_and_append_run_copies_stay() -> None:
    from pytest_backintel.records.attempts import attempt_fields, final_rows

    blocked = {"nodeid": "a[t1]", "outcome": "provider_error"}
    second = {"nodeid": "a[t1]", "outcome": "pass", **attempt_fields([blocked])}
    assert (second["attempt"], second["attempts"]) == (2, [blocked])
    third = {"nodeid": "a[t1]", "outcome": "pass", **attempt_fields([second])}
    assert third["attempt"] == 3
    assert [a["outcome"] for a in third["attempts"]] == ["provider_error", "pass"]
    assert all("attempts" not in a for a in third["attempts"]), "flat, oldest first"
    copies = [
        ({"nodeid": "b[t1]", "outcome": "pass"}, 1),
        ({"nodeid": "b[t1]", "outcome": "pass"}, 2),
    ]
    rows = [(blocked, 0), *copies, (second, 3)]
    assert final_rows(rows) == [*copies, (second, 3)], "--append-run copies are not attempts"


def test_a_torn_last_line_is_cut_before_a_resumed_writer_appends(tmp_path: Path) -> None:
    from pytest_backintel.records.writer import RecordWriter, read_records

    part = tmp_path / "parts" / "records-main.jsonl"
    part.parent.mkdir()
    part.write_text('{"nodeid": "a[t1]", "outcome": "pass"}\n{"nodeid": "b[t1]", "outc')
    writer = RecordWriter(tmp_path, "main")
    writer.write({"nodeid": "b[t1]", "outcome": "pass"})
    writer.close()
    assert [r["nodeid"] for r in read_records(part)] == ["a[t1]", "b[t1]"]
    assert part.read_text().count("\n") == 2
