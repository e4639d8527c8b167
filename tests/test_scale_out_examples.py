"""The scale-out examples in `docs/examples/` are valid and run as written.

The GitHub Actions workflow and the Kubernetes Indexed Job are validated offline against the
subsets of their schemas committed in `tests/schemas/` (written by hand from the reference
documentation; a broken file is shown to fail them), then every command they run is executed
here: each matrix job or completion index as its own process, side by side, then the merge.
Only the tools differ: `uv run X` runs this checkout's `X`, the workflow's `results/` and the
Job's volume are folders under `tmp_path`, the Job's PostgreSQL service is the local server,
and `PYTEST_ADDOPTS` narrows the selection to three cases to keep the test short.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from reports.load import load_run

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
CASES = ("l1-delivered-orders", "l1-canceled-orders-2018", "l1-average-review-score")
NARROW = f"-k '{' or '.join(CASES)}' -p no:cacheprovider"
EXPRESSION = re.compile(r"\$\{\{\s*([^}]+?)\s*\}\}")


def workflow() -> dict[str, Any]:
    data: dict[Any, Any] = yaml.safe_load((EXAMPLES / "github-actions-shards.yml").read_text())
    if True in data:  # YAML 1.1 reads the bare key `on` as a boolean; GitHub reads it as "on"
        data["on"] = data.pop(True)
    return data


def jobs() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((EXAMPLES / "k8s-indexed-job.yaml").read_text()))


def schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SCHEMAS / name).read_text())
    jsonschema.Draft202012Validator.check_schema(loaded)
    return loaded


def local(command: str) -> str:
    """The command with `uv run` as this checkout's interpreter runs it."""
    command = command.replace("uv run pytest", f"{sys.executable} -m pytest")
    return command.replace("uv run backintel", f"{Path(sys.executable).parent / 'backintel'}")


def github(text: str, values: dict[str, Any]) -> str:
    """`${{ expr }}` replaced by `values` (a test failure for an expression it does not know)."""

    def value(match: re.Match[str]) -> str:
        assert match.group(1) in values, f"unknown expression {match.group(0)} in {text!r}"
        return str(values[match.group(1)])

    return EXPRESSION.sub(value, text)


def bash(command: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def succeed(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        out, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, f"{proc.args}\n{out[-3000:]}"


def check_merged(run_dir: Path, parts: int) -> None:
    run = load_run(run_dir)
    assert sorted(r["scenario_id"] for r in run.records) == sorted(CASES)
    assert {r["outcome"] for r in run.records} == {"pass"}
    assert not run.missing_trials
    assert len(run.header["merged_from"]) == parts
    assert (run_dir / "scorecard.md").is_file()


def test_the_workflow_and_the_jobs_match_their_schemas() -> None:
    jsonschema.validate(workflow(), schema("github-workflow-subset.schema.json"))
    for job in jobs():
        jsonschema.validate(job, schema("k8s-job-subset.schema.json"))
    shards, merge = jobs()
    assert shards["spec"]["completionMode"] == "Indexed"
    assert merge["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]


@pytest.mark.parametrize(
    ("what", "breaks"),
    [
        ("workflow", lambda w: w["jobs"]["shards"]["steps"][0].update(run="echo")),
        ("workflow", lambda w: w["jobs"]["merge"].pop("runs-on")),
        ("workflow", lambda w: w["jobs"]["shards"]["strategy"].update(matrix={"shard": []})),
        ("job", lambda j: j["spec"].pop("completions")),
        ("job", lambda j: j["spec"]["template"]["spec"].update(restartPolicy="Always")),
        ("job", lambda j: j["spec"]["template"]["spec"]["containers"][0].pop("image")),
    ],
    ids=[
        "run-and-uses",
        "no-runs-on",
        "empty-matrix",
        "indexed-no-completions",
        "restart-always",
        "no-image",
    ],
)
def test_a_broken_example_fails_its_schema(what: str, breaks: Any) -> None:
    document = workflow() if what == "workflow" else jobs()[0]
    name = "github-workflow-subset" if what == "workflow" else "k8s-job-subset"
    breaks(document)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, schema(f"{name}.schema.json"))


def test_the_github_actions_matrix_runs_its_commands(tmp_path: Path) -> None:
    flow = workflow()
    shard_job, merge_job = flow["jobs"]["shards"], flow["jobs"]["merge"]
    assert merge_job["needs"] == "shards"
    matrix = shard_job["strategy"]["matrix"]["shard"]
    env = {**os.environ, "PYTEST_ADDOPTS": f"--results-dir={tmp_path / 'results'} {NARROW}"}
    # repository variables and secrets unset here, as GitHub leaves them: the reference analyst
    env |= {k: "" for k, v in shard_job["env"].items() if EXPRESSION.search(str(v))}
    runs = [s["run"] for s in shard_job["steps"] if s.get("run", "").startswith("uv run")]
    assert runs, "the shard job runs pytest"
    procs = [
        bash(local(github(run, {"matrix.shard": i, "strategy.job-total": len(matrix)})), ROOT, env)
        for i in matrix
        for run in runs
    ]
    succeed(procs)
    for step in merge_job["steps"]:  # the artifacts are already in results/ here
        if step.get("run", "").startswith("uv run"):
            succeed([bash(local(github(step["run"], {})), tmp_path, env)])
    check_merged(tmp_path / "results" / "benchmark", len(matrix))


def test_the_kubernetes_indexed_job_runs_its_commands(tmp_path: Path) -> None:
    shards, merge = jobs()
    volume = tmp_path / "volume"
    volume.mkdir()
    dsn = os.environ.get("BACKINTEL_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")

    def pod(job: dict[str, Any], index: int | None) -> subprocess.Popen[str]:
        (container,) = job["spec"]["template"]["spec"]["containers"]
        assert container["command"] == ["bash", "-c"]
        (script,) = container["args"]
        for mount in container["volumeMounts"]:
            script = script.replace(mount["mountPath"], str(volume))
        env = {**os.environ, "PYTEST_ADDOPTS": NARROW}
        env |= {e["name"]: e["value"] for e in container.get("env", [])}
        if "BACKINTEL_PG_DSN" in env:  # the cluster's PostgreSQL service: the local server
            env["BACKINTEL_PG_DSN"] = dsn
        if index is not None:
            env["JOB_COMPLETION_INDEX"] = str(index)
        return bash(local(script), ROOT, env)

    completions = shards["spec"]["completions"]
    succeed([pod(shards, i) for i in range(completions)])  # parallelism: all at once
    parts = sorted(p.name for p in volume.iterdir())
    assert parts == [f"part-{i}" for i in range(1, completions + 1)]
    for part in parts:
        shard = json.loads((volume / part / "run.json").read_text())["shard"]
        assert f"part-{shard['index']}" == part
        assert shard["total"] == completions
        assert {r["backend"] for r in load_run(volume / part).records} <= {"postgres"}
    succeed([pod(merge, None)])
    check_merged(volume / "benchmark", completions)
