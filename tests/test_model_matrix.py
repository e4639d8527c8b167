"""A model matrix in one command: `--model A --model B` runs every planned trial once per model
in one session, writes a run folder per model under the matrix folder with `matrix.json` and a
leaderboard whose pass rates carry intervals; a matrix killed part-way is finished by
`--resume`. Real pytest processes against the scripted OpenAI-compatible server, which answers
each model by its own script.
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
from reports.compare import compare_runs
from reports.load import load_run

ROOT = Path(__file__).resolve().parents[1]
CASES = ("l1-delivered-orders", "l1-canceled-orders-2018", "l1-average-review-score")
MODELS = {"openai:qwen3": "qwen3", "openai:llama3": "llama3"}
"""The models of the matrix and the names the server receives."""
WRONG = {"llama3": {CASES[1], CASES[2]}, "qwen3": set()}
"""The cases each model answers wrongly (off by one)."""


def script(server: ModelServer, delay_s: float = 0.0) -> None:
    """Per model and case: list_tables, run_sql with the check query, the answer (wrong for
    the cases `WRONG` names)."""
    refs = json.loads((ROOT / "scenarios" / "references" / "olist.json").read_text())
    for name, wrong in WRONG.items():
        for case in CASES:
            _, scenario = find_scenarios()[case]
            (metric,) = scenario.metrics
            value = refs["references"][case]["values"][metric.name] + (case in wrong)
            evidence = {"id": "e1", "kind": "sql", "code": scenario.check_sql}
            evidence["metrics"] = [metric.name]
            steps = [
                Step.call("list_tables", delay_s=delay_s, usage=(100, 10)),
                Step.call("run_sql", {"sql": scenario.check_sql}, delay_s=delay_s),
                Step.answer(
                    [{"name": metric.name, "value": value, "unit": metric.unit}], [evidence]
                ),
            ]
            server.script(f"`{metric.name}`", steps, model=name)


def command(server: ModelServer, results: Path, *args: str) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "-m", "development", "-k", " or ".join(CASES)]
    cmd += ["-p", "no:xdist", "-p", "no:cacheprovider", "--trials", "2"]
    for model in MODELS:
        cmd += ["--model", model]
    return [*cmd, "--model-base-url", server.url, f"--results-dir={results}", *args]


def run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    return done


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]


def outcomes(run_dir: Path) -> dict[str, str]:
    return {r["nodeid"]: r["outcome"] for r in records(run_dir)}


def test_one_command_runs_two_models_into_a_matrix_folder_with_a_leaderboard(
    model_server: ModelServer, tmp_path: Path
) -> None:
    script(model_server)
    done = run(command(model_server, tmp_path, "--run-id", "mx"))
    matrix_dir = tmp_path / "mx"
    every = records(matrix_dir)
    assert len(every) == 2 * 3 * 2, "2 models x 3 cases x 2 trials, one session"
    ids = [r["nodeid"] for r in every]
    assert all(n.endswith(("-openai-qwen3]", "-openai-llama3]")) for n in ids)
    order = [r.model for r in model_server.requests if r.step == 0]
    assert set(order[:4]) == {"qwen3", "llama3"}, "the models' trials are interleaved"
    matrix = json.loads((matrix_dir / "matrix.json").read_text())
    assert [m["folder"] for m in matrix["models"]] == ["openai-llama3", "openai-qwen3"]
    for model, name in MODELS.items():
        folder = matrix_dir / f"openai-{name}"
        header = json.loads((folder / "run.json").read_text())
        mine = records(folder)
        assert header["model"] == model
        assert {r["model"] for r in mine} == {model}
        assert len(mine) == 6
        assert sorted(header["planned_items"]) == sorted(r["nodeid"] for r in mine)
        wrong = {r["scenario_id"] for r in mine if r["outcome"] == "wrong_value"}
        assert wrong == WRONG[name]
        assert load_run(folder).missing_trials == []
    board = matrix["leaderboard"]
    assert [row["model"] for row in board] == ["openai:qwen3", "openai:llama3"]
    best, worst = board
    assert best["pass_rate"]["estimate"] == 1.0
    assert worst["pass_rate"]["estimate"] == 1 / 3
    for row in board:
        rate = row["pass_rate"]
        assert rate["low"] <= rate["estimate"] <= rate["high"]
        assert rate["method"]
        assert row["tokens"] > 0
        assert row["latency_p50_s"] is not None
    assert worst["versus_above"]["against"] == "openai:qwen3"
    assert "backintel: model matrix of 2 models" in done.stdout
    assert f"backintel: analyst openai:llama3 (API chat_completions at {model_server.url})" in (
        done.stdout
    )
    assert "backintel: leaderboard" in done.stdout
    assert "#1 openai:qwen3: pass 100.0% [" in done.stdout
    # each model's folder is a normal run: compare pairs the two models case by case
    result = compare_runs(
        load_run(matrix_dir / "openai-qwen3"), load_run(matrix_dir / "openai-llama3")
    )
    changes = {c.scenario_id: c.change for s in result.suites for c in s.cases}
    assert sorted(k for k, v in changes.items() if v == "broken") == sorted(WRONG["llama3"])
    assert worst["rank"] == 1, "3 cases cannot separate the two: the paired interval holds 0"
    backintel = Path(sys.executable).parent / "backintel"
    report = subprocess.run(
        [str(backintel), "report", str(matrix_dir)], capture_output=True, text=True, check=False
    )
    assert report.returncode == 0, report.stderr
    assert f"wrote {matrix_dir / 'leaderboard.md'}" in report.stdout
    table = (matrix_dir / "leaderboard.md").read_text()
    assert "| 1 | openai:qwen3 | 100.0% | [" in table
    assert "| 1 | openai:llama3 | 33.3% | [" in table
    assert worst["versus_above"]["low"] <= 0 <= worst["versus_above"]["high"]


def test_a_matrix_killed_part_way_is_finished_by_resume(
    model_server: ModelServer, tmp_path: Path
) -> None:
    script(model_server, delay_s=0.2)
    proc = subprocess.Popen(
        command(model_server, tmp_path, "--run-id", "cut", "--concurrency", "2"),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    part = tmp_path / "cut" / "parts" / "records-main.jsonl"
    deadline = time.monotonic() + 300
    while (len(part.read_text().splitlines()) if part.exists() else 0) < 3:
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline, "no trial finished"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the process we started, and its children
    proc.wait(timeout=60)
    cut = tmp_path / "cut"
    assert not (cut / "matrix.json").exists(), "killed: the session never finished"
    finished = len([line for line in part.read_text().splitlines() if line.endswith("}")])
    assert 3 <= finished < 12, "killed part-way"

    run(command(model_server, tmp_path, "--resume", "cut", "--concurrency", "2"))
    every = records(cut)
    plan = json.loads((cut / "run.json").read_text())["planned_items"]
    assert len(plan) == 12
    assert sorted(r["nodeid"] for r in every) == sorted(plan), "every planned trial exactly once"
    matrix = json.loads((cut / "matrix.json").read_text())
    assert {m["recorded"] for m in matrix["models"]} == {6}
    for name in MODELS.values():
        wrong = {
            r["scenario_id"] for r in records(cut / f"openai-{name}") if r["outcome"] != "pass"
        }
        assert wrong == WRONG[name]
    header = json.loads((cut / "run.json").read_text())
    assert header["resumed"][0]["records_after"] == 12


def test_a_single_model_keeps_its_item_ids_and_folder(
    model_server: ModelServer, tmp_path: Path
) -> None:
    script(model_server)
    cmd = command(model_server, tmp_path, "--run-id", "one")
    at = cmd.index("openai:llama3")
    run(cmd[: at - 1] + cmd[at + 1 :])
    ids = sorted(outcomes(tmp_path / "one"))
    assert ids[0].endswith("l1-average-review-score[t1]")
    assert not (tmp_path / "one" / "matrix.json").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "openai:a", "--model", "openai:a"], "is given twice"),
        (["--model", "openai:a", "--model", "openai:b", "--analyst", "reference"], "matrix"),
        (["--model", "openai:a.", "--model", "openai:a"], "the same folder name"),
    ],
)
def test_a_matrix_that_cannot_run_is_a_usage_error(
    pytester: pytest.Pytester, args: list[str], message: str
) -> None:
    result = pytester.runpytest_subprocess("-p", "no:xdist", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_matrix_shards_merge_into_one_matrix(model_server: ModelServer, tmp_path: Path) -> None:
    script(model_server)
    for index in (1, 2):
        run(command(model_server, tmp_path, "--run-id", f"part-{index}", "--shard", f"{index}/2"))
    parts = [records(tmp_path / f"part-{i}") for i in (1, 2)]
    assert sorted(len(p) for p in parts) == [6, 6], "the plan of 12 dealt in two"
    backintel = Path(sys.executable).parent / "backintel"
    merge = [str(backintel), "merge", str(tmp_path / "merged")]
    done = subprocess.run(
        [*merge, str(tmp_path / "part-1"), str(tmp_path / "part-2")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    matrix = json.loads((tmp_path / "merged" / "matrix.json").read_text())
    assert [(m["planned"], m["recorded"]) for m in matrix["models"]] == [(6, 6), (6, 6)]
    assert [row["model"] for row in matrix["leaderboard"]] == ["openai:qwen3", "openai:llama3"]
    for name in MODELS.values():
        mine = records(tmp_path / "merged" / f"openai-{name}")
        assert {r["scenario_id"] for r in mine if r["outcome"] != "pass"} == WRONG[name]
        assert load_run(tmp_path / "merged" / f"openai-{name}").missing_trials == []


def test_an_outage_hits_every_model_alike_and_retry_blocked_scores_them(
    model_server: ModelServer, tmp_path: Path
) -> None:
    script(model_server)
    model_server.fail_next(8)  # the first two trials, 4 attempts each, answered HTTP 500
    serial = ["--concurrency", "1", "--max-provider-failures", "10"]
    run(command(model_server, tmp_path, "--run-id", "outage", *serial))
    run_dir = tmp_path / "outage"
    blocked = {r["model"] for r in records(run_dir) if r["outcome"] == "provider_error"}
    assert blocked == set(MODELS), "interleaved: the outage met both models, one trial each"
    board = json.loads((run_dir / "matrix.json").read_text())["leaderboard"]
    assert [row["blocked"] for row in board] == [1, 1], "blocked apart, not failed"

    done = run(command(model_server, tmp_path, "--retry-blocked", "outage", *serial))
    assert "--retry-blocked outage: 2 of 12 planned trial(s) to run (2 blocked" in done.stdout
    after = records(run_dir)
    assert len(after) == 12
    assert not [r for r in after if r["outcome"] == "provider_error"]
    board = json.loads((run_dir / "matrix.json").read_text())["leaderboard"]
    assert [(row["model"], row["passed"], row["blocked"]) for row in board] == [
        ("openai:qwen3", 6, 0),
        ("openai:llama3", 2, 0),
    ]


def test_a_matrix_runs_on_xdist_workers(model_server: ModelServer, tmp_path: Path) -> None:
    script(model_server)
    cmd = command(model_server, tmp_path, "--run-id", "mx")
    at = cmd.index("no:xdist")
    run([*cmd[: at - 1], *cmd[at + 1 :], "-n", "2"])
    matrix = json.loads((tmp_path / "mx" / "matrix.json").read_text())
    assert [(m["planned"], m["recorded"]) for m in matrix["models"]] == [(6, 6), (6, 6)]
    workers = {r["worker"] for r in records(tmp_path / "mx")}
    assert workers == {"gw0", "gw1"}
    for name in MODELS.values():
        mine = records(tmp_path / "mx" / f"openai-{name}")
        assert {r["scenario_id"] for r in mine if r["outcome"] != "pass"} == WRONG[name]


def test_the_scripted_server_answers_each_model_by_its_own_script() -> None:
    import urllib.request

    from pytest_backintel.testing.model_script import model_and_match
    from pytest_backintel.testing.model_server import model_server

    assert model_and_match("@qwen3 delivered") == ("qwen3", "delivered")
    assert model_and_match("delivered orders") == (None, "delivered orders")
    with model_server() as server:
        server.script("delivered", [Step(text="from qwen3")], model="qwen3")
        server.script("delivered", [Step(text="from anyone")])

        def ask(model: str) -> str:
            body = {"model": model, "messages": [{"role": "user", "content": "delivered?"}]}
            request = urllib.request.Request(
                f"{server.url}/chat/completions",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                answer = json.loads(response.read())
            return str(answer["choices"][0]["message"]["content"])

        assert ask("qwen3") == "from qwen3"
        assert ask("llama3") == "from anyone"


@pytest.mark.parametrize(("groups", "most"), [(("p", "p"), 3), (("p", "q"), 6)])
def test_the_models_at_one_provider_share_its_connections(
    groups: tuple[str, str], most: int
) -> None:
    """`--max-connections 3`: two models at one provider have 3 requests in flight between
    them; at two providers, 3 each."""
    import asyncio

    from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart
    from pydantic_ai.models import ModelRequestParameters
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from analyst.connections import ConnectionLimitedModel

    now_most = [0, 0]

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        now_most[0] += 1
        now_most[1] = max(now_most)
        await asyncio.sleep(0.02)
        now_most[0] -= 1
        return ModelResponse(parts=[TextPart("ok")])

    models = [ConnectionLimitedModel(FunctionModel(respond), 3, group=g) for g in groups]
    prompt: list[ModelMessage] = [ModelRequest.user_text_prompt("how many?")]

    async def both() -> None:
        params = ModelRequestParameters()
        await asyncio.gather(*(m.request(prompt, None, params) for m in models for _ in range(8)))

    asyncio.run(both())
    assert now_most[1] == most
