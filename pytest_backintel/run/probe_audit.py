"""Which scenarios no data probe can move (`backintel references build`): said once per
scenario before any run, so an answer whose literal would pass is never a surprise. Their
trials are marked unguarded as well (`evidence.probe_moves`)."""

from __future__ import annotations

from pathlib import Path

from pytest_backintel.collect.loading import ScenarioFileError, load_scenario_file
from pytest_backintel.collect.references import scenario_files
from pytest_backintel.collect.worlds import data_dir
from pytest_backintel.run.hand_score import HandScorer
from stores.base import StoreError

__all__ = ["unguarded_scenarios"]


def unguarded_scenarios(roots: list[Path], root: Path) -> list[str]:
    """`file: UNGUARDED: why` for each answerable scenario bound to data of your own whose
    answer no probe moves (or whose probes could not be built)."""
    scorer = HandScorer(data_dir(root))
    lines = []
    try:
        for path in scenario_files(roots):
            try:
                scenario = load_scenario_file(path)
            except ScenarioFileError:
                continue  # `references build` has named it
            if scenario.dataset.source_kind is None or not scenario.answerable:
                continue
            if scenario.prediction is not None:
                continue  # checked on permuted labels, not on a probe
            try:
                why = scorer.unmoved(scenario)
            except (StoreError, OSError, ValueError) as exc:
                why = f"the data probe could not be built: {exc}"
            if why:
                lines.append(f"{path}: UNGUARDED: {why}; its trials will be marked unguarded")
    finally:
        scorer.close()
    return lines
