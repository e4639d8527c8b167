"""How a trial that did not pass reads in pytest's report: question, outcome, each metric's
expected, got and tolerance, whether its evidence reproduced, and the evidence itself."""

from __future__ import annotations

from pytest_backintel.collect.items import ItemFailure
from pytest_backintel.run.trial import TrialResult

__all__ = ["ScenarioFailure", "render_failure"]


class ScenarioFailure(ItemFailure):
    """A scored trial that did not pass."""

    def __init__(self, result: TrialResult) -> None:
        self.result = result
        super().__init__(result.score.outcome.value)

    def lines(self) -> list[str]:
        return render_failure(self.result)


def render_failure(result: TrialResult) -> list[str]:
    score, scenario = result.score, result.scenario
    lines = [
        f"outcome: {score.outcome.value}",
        f"question: {scenario.question.strip()}",
        f"store: {result.store_label}",
    ]
    for check in score.checks:
        lines.append(
            f"metric {check.name} ({check.kind}): expected {check.expected!r}, got {check.got!r}, "
            f"tolerance {check.tolerance:g}, value {'ok' if check.value_ok else 'WRONG'}, "
            f"evidence {'reproduced' if check.evidence_ok else 'NOT reproduced'}"
        )
    lines += [f"- {r.outcome.value}: {r.message}" for r in score.reasons]
    run = result.run
    if run is not None and run.output is not None:
        lines.append(f"answer: {run.output.model_dump_json()}")
    for ev in result.evidence:
        state = "reproduced" if ev.ok else (ev.error or "did not reproduce")
        lines.append(f"evidence {ev.id} ({ev.kind}, cites {ev.cited}): {state}")
        lines += ["    " + code_line for code_line in ev.code.strip().splitlines()]
    return lines
