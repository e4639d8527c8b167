"""`backintel compare`: the promotion policy, the paired table, McNemar and pass^k."""

from __future__ import annotations

from fractions import Fraction
from itertools import pairwise
from math import comb
from pathlib import Path
from typing import Any

import pytest
from helpers import CALIBRATION_CASES
from hypothesis import given
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion

from reports import compare_runs, load_run, mcnemar_exact, pass_hat_k
from reports.cli import main
from reports.testing import header, record, write_run


def make_run(
    root: Path,
    run_id: str,
    outcomes: dict[str, str] | None = None,
    *,
    trials: int = 1,
    trial_outcomes: dict[str, list[str]] | None = None,
    sha: dict[str, str] | None = None,
    data_hash: str | None = None,
    calibration: bool = True,
) -> Path:
    """A run over CALIBRATION_CASES; every trial passes unless `outcomes` / `trial_outcomes`
    say otherwise."""
    records = []
    for spec in CALIBRATION_CASES:
        case = spec["case"]
        per_trial = (trial_outcomes or {}).get(case) or [
            (outcomes or {}).get(case, "pass")
        ] * trials
        for t, outcome in enumerate(per_trial):
            extra: dict[str, Any] = {"sha": (sha or {}).get(case)}
            if data_hash:
                extra["data_hash"] = data_hash
            records.append(record(**spec, outcome=outcome, trial=t, run_id=run_id, **extra))
    return write_run(root / run_id, header(run_id, calibration=calibration, trials=trials), records)


def run_cli(capsys: Any, *args: Path) -> tuple[int, str, str]:
    code = main(["compare", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- the decision --------------------------------------------------------------------------


def test_reference_against_itself_shows_no_change(
    tmp_path: Path, capsys: Any, snapshot: SnapshotAssertion
) -> None:
    """Nothing breaks, but the policy demands an improvement on the original cases."""
    base = make_run(tmp_path, "base")
    code, out, _ = run_cli(capsys, base, base)
    assert code == 1
    assert "no change: every case has the same outcomes in both runs" in out
    assert "broken:" not in out
    assert "no improvement on the original cases: no case fixed" in out
    assert out == snapshot


def test_a_perturbed_candidate_is_rejected_listing_every_broken_case(
    tmp_path: Path, capsys: Any, snapshot: SnapshotAssertion
) -> None:
    base = make_run(tmp_path, "base")
    broken = {
        "delivered_orders": "wrong_value",
        "repeat_person_share": "unsupported_evidence",
        "control_delivered_orders": "wrong_value",
    }
    cand = make_run(tmp_path, "perturbed", broken)
    code, out, _ = run_cli(capsys, base, cand)
    assert code == 1
    decision = out[out.index("DECISION: REJECT") :]
    for case, outcome in broken.items():
        assert f"broken: {case} (baseline pass -> candidate {outcome})" in decision
    assert "missing_cost_profit" not in decision
    assert out == snapshot


def test_each_suite_is_decided_separately_and_all_are_required(tmp_path: Path) -> None:
    base = make_run(tmp_path, "base", {"original_missing_cost": "invented_value"})
    # fixes the original case, breaks one development case
    cand = make_run(tmp_path, "cand", {"delivered_orders": "wrong_value"})
    result = compare_runs(load_run(base), load_run(cand))
    decisions = {s.split: s.accepted for s in result.suites}
    assert decisions == {"development": False, "regression": True}
    assert not result.accepted


def test_an_improvement_on_the_original_cases_accepts(tmp_path: Path) -> None:
    base = make_run(tmp_path, "base", {"original_missing_cost": "invented_value"})
    cand = make_run(tmp_path, "cand")
    result = compare_runs(load_run(base), load_run(cand))
    regression = next(s for s in result.suites if s.split == "regression")
    assert [c.scenario_id for c in regression.cases if c.change == "fixed"] == [
        "original_missing_cost"
    ]
    assert result.accepted


def test_no_improvement_on_failing_original_cases_rejects(tmp_path: Path) -> None:
    outcomes = {"original_missing_cost": "invented_value"}
    base = make_run(tmp_path, "base", outcomes)
    cand = make_run(tmp_path, "cand", outcomes)
    result = compare_runs(load_run(base), load_run(cand))
    regression = next(s for s in result.suites if s.split == "regression")
    assert "no improvement on the original cases: no case fixed" in regression.reasons
    assert "mandatory case fails: original_missing_cost (invented_value)" in regression.reasons
    assert not result.accepted


def test_a_fix_does_not_excuse_a_failing_mandatory_case(tmp_path: Path) -> None:
    base = make_run(
        tmp_path,
        "base",
        {"original_missing_cost": "invented_value", "original_delivery_report": "duplicate_metric"},
    )
    cand = make_run(tmp_path, "cand", {"original_delivery_report": "duplicate_metric"})
    regression = compare_runs(load_run(base), load_run(cand)).suites[1]
    assert regression.count("fixed") == 1
    assert regression.reasons == [
        "mandatory case fails: original_delivery_report (duplicate_metric)"
    ]


def test_a_blocked_candidate_case_is_not_measured_and_rejects(tmp_path: Path) -> None:
    base = make_run(tmp_path, "base")
    cand = make_run(tmp_path, "cand", {"repeat_person_share": "infra_error"})
    development = compare_runs(load_run(base), load_run(cand)).suites[0]
    # a case the candidate could not be measured on is not a regression, and still rejects
    assert development.reasons == [
        "mandatory case blocked, not measured: repeat_person_share (infra_error)"
    ]
    assert [c.change for c in development.cases if c.scenario_id == "repeat_person_share"] == [
        "blocked"
    ]
    base2 = make_run(tmp_path, "base2", {"repeat_person_share": "wrong_value"})
    development = compare_runs(load_run(base2), load_run(cand)).suites[0]
    assert development.reasons == [
        "mandatory case blocked, not measured: repeat_person_share (infra_error)"
    ]


def test_every_trial_must_pass_and_pass_k_is_reported(tmp_path: Path, capsys: Any) -> None:
    base = make_run(tmp_path, "base", trials=3)
    cand = make_run(
        tmp_path,
        "cand",
        trials=3,
        trial_outcomes={"delivered_orders": ["pass", "wrong_value", "pass"]},
    )
    code, out, _ = run_cli(capsys, base, cand)
    assert code == 1
    assert (
        "broken: delivered_orders (baseline pass, pass, pass -> candidate pass, wrong_value, pass)"
        in out
    )
    # development: (3,3), (3,2), (3,3) -> k=1: 8/9, k=2: (1 + 1/3 + 1)/3 = 7/9, k=3: 2/3
    assert "pass^k candidate k=1: 0.889, k=2: 0.778, k=3: 0.667" in out
    assert "pass^k baseline  k=1: 1.000, k=2: 1.000, k=3: 1.000" in out


# -- refusals ------------------------------------------------------------------------------


def test_refuses_runs_whose_scenarios_differ(tmp_path: Path, capsys: Any) -> None:
    base = make_run(tmp_path, "base")
    cand = make_run(tmp_path, "cand", sha={"delivered_orders": "edited"})
    code, out, err = run_cli(capsys, base, cand)
    assert (code, out) == (2, "")
    assert "scenario hash differs" in err
    assert "(changed: delivered_orders)" in err
    assert "data hash" not in err


def test_refuses_runs_whose_data_differ(tmp_path: Path, capsys: Any) -> None:
    base = make_run(tmp_path, "base")
    cand = make_run(tmp_path, "cand", data_hash="e" * 64)
    code, _, err = run_cli(capsys, base, cand)
    assert code == 2
    assert (
        "data hash of world 'olist' differs: baseline dddddddddddd, candidate eeeeeeeeeeee" in err
    )
    assert "scenario hash" not in err


def test_refuses_an_empty_run(tmp_path: Path, capsys: Any) -> None:
    base = make_run(tmp_path, "base")
    empty = write_run(tmp_path / "empty", header("empty"), [])
    code, _, err = run_cli(capsys, base, empty)
    assert code == 2
    assert "the candidate run has no records" in err


# -- statistics ----------------------------------------------------------------------------


def test_pass_hat_k_hand_computed() -> None:
    assert pass_hat_k([(4, 2)], 1) == pytest.approx(0.5)
    assert pass_hat_k([(4, 2)], 2) == pytest.approx(1 / 6)  # C(2,2)/C(4,2)
    assert pass_hat_k([(4, 2)], 3) == 0.0
    assert pass_hat_k([(3, 3), (3, 1)], 1) == pytest.approx(2 / 3)
    assert pass_hat_k([(3, 3), (3, 1)], 2) == pytest.approx(0.5)
    assert pass_hat_k([(5, 4), (5, 5), (5, 0)], 2) == pytest.approx((6 / 10 + 1 + 0) / 3)
    assert pass_hat_k([(2, 2)], 3) is None  # undefined beyond the trials run
    assert pass_hat_k([], 1) is None
    with pytest.raises(ValueError, match="between 0 and attempted"):
        pass_hat_k([(2, 3)], 1)


cases_strategy = st.lists(
    st.integers(1, 8).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))),
    min_size=1,
    max_size=12,
)


@given(cases_strategy)
def test_pass_hat_k_properties(cases: list[tuple[int, int]]) -> None:
    top = min(n for n, _ in cases)
    found = [pass_hat_k(cases, k) for k in range(1, top + 1)]
    values = [v for v in found if v is not None]
    assert len(values) == len(found)
    assert all(0.0 <= v <= 1.0 for v in values)
    assert all(a >= b for a, b in pairwise(values))  # never rises with k
    assert values[0] == pytest.approx(sum(Fraction(c, n) for n, c in cases) / len(cases))


def test_mcnemar_hand_computed() -> None:
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 5) == pytest.approx(0.0625)  # 2 * (1/2)^5
    assert mcnemar_exact(1, 5) == pytest.approx(0.21875)  # 2 * (1 + 6) / 64
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(2, 10) == pytest.approx(158 / 4096)  # 2 * (1 + 12 + 66) / 4096
    assert mcnemar_exact(0, 1) == 1.0
    with pytest.raises(ValueError, match="non-negative"):
        mcnemar_exact(-1, 2)


def _minlike_p(a: int, b: int) -> float:
    """Independent form: total probability of outcomes no more likely than the observed one."""
    n = a + b
    observed = comb(n, a)
    return float(sum(Fraction(comb(n, i), 2**n) for i in range(n + 1) if comb(n, i) <= observed))


@given(st.integers(0, 40), st.integers(0, 40))
def test_mcnemar_agrees_with_the_minlike_definition(fixed: int, broken: int) -> None:
    p = mcnemar_exact(fixed, broken)
    assert 0.0 < p <= 1.0
    assert p == mcnemar_exact(broken, fixed)
    assert p == pytest.approx(_minlike_p(fixed, broken))
