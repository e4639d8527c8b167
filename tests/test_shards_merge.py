"""`--shard I/N` as separate processes side by side, then `backintel merge`: the merged run is
the single-process run for every report (outcomes, scorecard numbers, pass^k, compare,
`score --run`); parts of another plan, a trial recorded twice and missing trials are named.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_backintel.options import shard_spec
from pytest_backintel.run.merge import MergeRefused, merge_runs
from pytest_backintel.run.shards import assign, stable_key
from reports.compare import compare_runs, render_comparison
from reports.load import load_run
from reports.summary import summarize

ROOT = Path(__file__).resolve().parents[1]
SELECT = ["-m", "development and level1"]
"""Every level-1 development case (18 today) with the reference analyst."""


def bench(results: Path, *args: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "pytest", *SELECT, "-p", "no:xdist", "-p", "no:cacheprovider"]
    cmd += [f"--results-dir={results}", *args]
    return subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def finish(proc: subprocess.Popen[str]) -> str:
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-3000:]
    return out


def backintel(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    cmd = [str(Path(sys.executable).parent / "backintel"), *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)


def outcomes(run_dir: Path) -> dict[str, str]:
    return {r["nodeid"]: r["outcome"] for r in load_run(run_dir).records}


def test_three_shards_merged_equal_one_process(tmp_path: Path) -> None:
    results = tmp_path / "results"
    single = bench(results, "--run-id", "single")
    parts = [bench(results, "--run-id", f"part-{i}", "--shard", f"{i}/3") for i in (1, 2)]
    parts.append(  # the third shard runs its part on two xdist workers
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                *SELECT,
                "-n",
                "2",
                "--shard",
                "3/3",
                f"--results-dir={results}",
                "--run-id",
                "part-3",
                "-p",
                "no:cacheprovider",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    )
    for proc in [single, *parts]:
        finish(proc)
    whole = outcomes(results / "single")
    shards = [
        json.loads((results / f"part-{i}" / "run.json").read_text())["shard"] for i in (1, 2, 3)
    ]
    n = len(whole)
    sizes = [s["trials"] for s in shards]
    assert sum(sizes) == n
    assert max(sizes) - min(sizes) <= 1, "balanced: sizes differ by one at most"
    assert {s["plan_hash"] for s in shards} == {shards[0]["plan_hash"]}
    assert sorted(shards[0]["plan"]) == sorted(whole), "each shard records the whole plan"
    seen = [set(outcomes(results / f"part-{i}")) for i in (1, 2, 3)]
    assert sum(len(s) for s in seen) == len(set().union(*seen)) == n, "disjoint, complete"

    done = backintel(
        "merge", str(results / "merged"), *(str(results / f"part-{i}") for i in (1, 2, 3))
    )
    assert done.returncode == 0, done.stderr
    assert f"{n} trial record(s)" in done.stdout
    merged_run, single_run = load_run(results / "merged"), load_run(results / "single")
    assert outcomes(results / "merged") == whole
    assert merged_run.planned_nodeids == single_run.planned_nodeids
    assert not merged_run.missing_trials
    a, b = summarize(single_run), summarize(merged_run)
    assert (a.overall, a.breakdowns, a.cases, a.pass_k) == (
        b.overall,
        b.breakdowns,
        b.cases,
        b.pass_k,
    )
    assert (merged_run.scenario_hash, merged_run.data_hashes) == (
        single_run.scenario_hash,
        single_run.data_hashes,
    )
    result = compare_runs(single_run, merged_run)
    assert result.no_change
    assert result.accepted == compare_runs(single_run, single_run).accepted
    text = render_comparison(result).splitlines()
    assert text[2:] == render_comparison(compare_runs(single_run, single_run)).splitlines()[2:]
    header = json.loads((results / "merged" / "run.json").read_text())
    assert [p["run_id"] for p in header["merged_from"]] == ["part-1", "part-2", "part-3"]
    assert (
        header["outcomes"] == json.loads((results / "single" / "run.json").read_text())["outcomes"]
    )
    rescored = backintel("score", "--run", str(results / "merged"))
    assert rescored.returncode == 0, rescored.stderr[-2000:]
    assert f"{n} recorded answers scored again: {n} agree" in rescored.stdout
    report = backintel("report", str(results / "merged"), "--out", str(tmp_path / "report"))
    assert report.returncode == 0
    assert f"{n}/{n} attempted trials passed" in report.stdout

    # a fourth part from another plan (one case fewer) is refused, naming it
    finish(bench(results, "-k", "not l1-delivered-orders", "--run-id", "other", "--shard", "1/3"))
    parts_and_other = [str(results / p) for p in ("part-1", "part-2", "part-3", "other")]
    refused = backintel("merge", str(results / "refused"), *parts_and_other)
    assert refused.returncode == 2
    assert f"{results / 'other'} is of another plan" in refused.stderr
    assert not (results / "refused").exists()

    # a trial recorded twice is refused; a missing part is named, and --resume finishes it
    shutil.copytree(results / "part-1", results / "again")
    doubled = backintel(
        "merge", str(results / "twice"), *(str(results / p) for p in ("part-1", "again"))
    )
    assert doubled.returncode == 2
    assert "recorded in more than one part" in doubled.stderr
    short = backintel(
        "merge", str(results / "short"), str(results / "part-1"), str(results / "part-2")
    )
    assert short.returncode == 1
    assert f"{shards[2]['trials']} planned trial(s) have no record in any part" in short.stderr
    assert "--resume short" in short.stderr
    finish(bench(results, "--resume", "short"))
    assert outcomes(results / "short") == whole
    assert compare_runs(single_run, load_run(results / "short")).no_change


def test_merge_refuses_parts_of_another_analyst(tmp_path: Path) -> None:
    """Same plan, another analyst (a different method): refused with the field named."""
    results = tmp_path / "results"
    procs = [
        bench(results, "-k", "delivered", "--run-id", "a", "--shard", "1/2"),
        bench(
            results, "-k", "delivered", "--run-id", "b", "--shard", "2/2", "--analyst", "refuse-all"
        ),
    ]
    for proc in procs:
        proc.communicate(timeout=600)
    with pytest.raises(MergeRefused, match=r"analyst\.spec is 'refuse-all'"):
        merge_runs(tmp_path / "out", [results / "a", results / "b"])


@given(
    st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=60, unique=True),
    st.integers(1, 9),
)
def test_shards_are_balanced_disjoint_and_cover_the_plan(names: list[str], total: int) -> None:
    trials = {n: n[:3] for n in names}
    where = assign(trials, total)
    assert set(where) == set(names)
    assert set(where.values()) <= set(range(1, total + 1))
    sizes = [sum(1 for s in where.values() if s == i) for i in range(1, total + 1)]
    assert max(sizes) - min(sizes) <= 1
    assert assign(dict(reversed(list(trials.items()))), total) == where, "order does not matter"


def test_the_split_is_a_stable_hash_and_durations_balance_the_work() -> None:
    # sha256 of the item id, not the per-process salted hash(): pinned here, so a change of
    # machine, Python version or PYTHONHASHSEED cannot move a trial to another shard
    key = "f540ceda570335c61911097c4093cc4c8b1d07616ac2d0a893d2c604e6229411"
    assert stable_key("a.scenario.yaml::a[t1]") == key
    trials = {f"x.scenario.yaml::c{i}[t1]": f"c{i}" for i in range(6)}
    assert [assign(trials, 3)[f"x.scenario.yaml::c{i}[t1]"] for i in range(6)] == [1, 2, 3, 3, 2, 1]
    durations = {"c0": 10.0, "c1": 1.0, "c2": 1.0, "c3": 1.0, "c4": 1.0, "c5": 1.0}
    where = assign(trials, 2, durations)
    heavy = where["x.scenario.yaml::c0[t1]"]
    assert [n for n, s in where.items() if s == heavy] == ["x.scenario.yaml::c0[t1]"]
    assert sum(1 for s in where.values() if s != heavy) == 5, "the slow case alone"


@pytest.mark.parametrize("bad", ["0/3", "4/3", "1", "a/b", "1/0", "-1/2", ""])
def test_a_bad_shard_is_a_usage_error_quoting_it(bad: str) -> None:
    with pytest.raises(pytest.UsageError, match=f"--shard {bad!r}: expected I/N"):
        shard_spec(bad)


def test_shard_spec_reads_index_and_total() -> None:
    assert shard_spec("2/8") == (2, 8)
