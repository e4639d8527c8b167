"""The optional narrative judge of a trial (`--judge-model`): labelled uncalibrated, kept
beside the outcome, never part of it."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_backintel.analyst_api import AnalystRun
from pytest_backintel.scenario import Scenario

__all__ = ["check_judge", "judge_trial"]


def check_judge(judge_model: str | None, analyst_model: str | None) -> None:
    """A judge must be of another model family than the analyst it judges."""
    if judge_model and analyst_model:
        from pytest_backintel.scoring.judge import JudgeFamilyError, check_judge_family

        try:
            check_judge_family(judge_model, analyst_model)
        except JudgeFamilyError as exc:
            raise pytest.UsageError(f"--judge-model: {exc}") from exc


def judge_trial(
    judge_model: str | None, analyst_model: str | None, scenario: Scenario, run: AnalystRun | None
) -> dict[str, Any] | None:
    """The judge's scores of the answer's narrative, or None without a judge or an answer."""
    if not judge_model or run is None or run.output is None:
        return None
    from pytest_backintel.scoring.judge import JudgeError, judge_narrative

    try:
        score = judge_narrative(
            scenario.question, run.output, judge_model, analyst_model=analyst_model
        )
    except JudgeError as exc:
        return {"error": str(exc), "calibrated": False, "judge_model": judge_model}
    return score.to_json()
