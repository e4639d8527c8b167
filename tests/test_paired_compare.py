"""`backintel compare` on runs built from recorded trials whose true difference is known: the
verdict follows the paired interval (better, worse, no detectable difference with its
detectable size), and three runs are compared pair by pair with Holm's correction."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from reports.cli import main
from reports.testing import header, record, write_run

CASES, TRIALS = 40, 3


def baseline_trials() -> dict[str, list[str]]:
    """40 cases x 3 trials, seeded: case pass probabilities from Beta(2, 2)."""
    rng = np.random.default_rng(11)
    p = rng.beta(2, 2, size=CASES)
    passes = rng.random((CASES, TRIALS)) < p[:, None]
    return {
        f"case-{i:02d}": ["pass" if x else "wrong_value" for x in row]
        for i, row in enumerate(passes)
    }


def shifted(
    trials: dict[str, list[str]], to: str, count: int, start: int = 0
) -> dict[str, list[str]]:
    """From case `start` on, the first `count` cases that are not already all `to`, turned
    all `to`."""
    out = dict(trials)
    changed = 0
    for case, outcomes in list(trials.items())[start:]:
        if changed < count and set(outcomes) != {to}:
            out[case], changed = [to] * TRIALS, changed + 1
    return out


def write(folder: Path, run_id: str, trials: dict[str, list[str]]) -> str:
    head = header(run_id, calibration=False, trials=TRIALS)
    head["suites"] = {"shop": {"policy": {}}}
    records = [
        record(case, outcome, trial=t, run_id=run_id, kind="custom") | {"suite": "shop"}
        for case, outcomes in trials.items()
        for t, outcome in enumerate(outcomes, 1)
    ]
    return str(write_run(folder / run_id, head, records))


def rate(trials: dict[str, list[str]]) -> float:
    return float(np.mean([np.mean([o == "pass" for o in v]) for v in trials.values()]))


@pytest.fixture
def runs(tmp_path: Path) -> dict[str, tuple[str, float]]:
    """Run folders and each one's true difference from the baseline."""
    base = baseline_trials()
    up, down = shifted(base, "pass", 12), shifted(base, "wrong_value", 12)
    same = shifted(shifted(base, "pass", 2), "wrong_value", 2, start=20)  # 2 up, 2 down
    return {
        name: (write(tmp_path, name, trials), rate(trials) - rate(base))
        for name, trials in (("base", base), ("up", up), ("down", down), ("same", same))
    }


def compare(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["compare", *args])
    return code, capsys.readouterr().out


def test_known_differences_give_better_worse_and_no_detectable_difference(
    runs: dict[str, tuple[str, float]], capsys: pytest.CaptureFixture[str]
) -> None:
    base = runs["base"][0]
    up_path, up_truth = runs["up"]
    assert up_truth > 0.2
    code, out = compare(capsys, base, up_path)
    assert code == 0, out
    assert "suite shop: BETTER" in out
    assert "VERDICT: better" in out
    line = next(x for x in out.splitlines() if "paired difference (candidate" in x)
    assert f"{up_truth:+.3f}" in line
    assert "(paired over 40 cases, clustered by case, 95%)" in line

    down_path, down_truth = runs["down"]
    code, out = compare(capsys, base, down_path)
    assert code == 1, out
    assert "suite shop: WORSE" in out
    assert f"{down_truth:+.3f}" in out
    assert "excludes 0 on the worse side" in out

    same_path, same_truth = runs["same"]
    code, out = compare(capsys, base, same_path)
    assert code == 0, out
    assert abs(same_truth) < 0.05
    assert "suite shop: NO DETECTABLE DIFFERENCE" in out
    detectable = next(x for x in out.splitlines() if "smallest detectable difference" in x)
    size = float(detectable.split(":")[1].split()[0])
    assert 0.05 < size < 0.5
    assert "(80% power, alpha 0.05)" in detectable


def test_three_runs_every_pair_with_holm(
    runs: dict[str, tuple[str, float]], capsys: pytest.CaptureFixture[str]
) -> None:
    from reports.load import load_run
    from reports.pairwise import compare_many

    paths = [runs[n][0] for n in ("base", "up", "same")]
    code, out = compare(capsys, *paths)
    assert code == 0, out
    assert "every pair paired by case" in out
    assert "Holm's correction over 3 comparisons" in out
    result = compare_many([load_run(p) for p in paths])
    raw = sorted(p.p_value for p in result.pairs)
    held = sorted(p.adjusted_p for p in result.pairs)
    # Holm by hand: the i-th smallest p times (m - i), made monotone, capped at 1
    expected = np.minimum(1, np.maximum.accumulate([r * (3 - i) for i, r in enumerate(raw)]))
    assert held == pytest.approx(expected)
    verdicts = {(p.first, p.second): p.verdict for p in result.pairs}
    assert verdicts[("base", "up")] == "better"
    assert verdicts[("base", "same")] == "no detectable difference"
    assert verdicts[("up", "same")] == "worse"
    row = next(x for x in out.splitlines() if x.split()[:2] == ["base", "same"])
    assert "no detectable difference (detectable: 0." in row
    # a fourth run that is worse than the baseline fails the command
    code, out = compare(capsys, *paths, runs["down"][0])
    assert code == 1
    assert "VERDICT: down worse than the baseline base" in out
