"""The answer contract and comparison rules, stated in the task every analyst receives, so a
custom analyst is measured on the same terms as the built-in one."""

from __future__ import annotations

from pytest_backintel.scenario import Scenario
from pytest_backintel.tolerance import TOLERANCE

__all__ = ["COMPARISON_RULES", "answer_rules"]

COMPARISON_RULES = (
    "How answers are compared: counts exactly; money in major currency units (e.g. BRL, not "
    f"centavos) to ±{TOLERANCE['currency']}; ratios as fractions (0.25, not 25%) and durations "
    f"in the stated unit to ±{TOLERANCE['ratio']}; text exactly after trimming; tables row by "
    "row. Report every value at full precision (never rounded): cited evidence must reproduce "
    "each reported value exactly, and must compute it from the store's tables. A value is a "
    "JSON number (never a string, never true/false), a string for text, or a list of row "
    "objects for a table. If the data cannot answer, refuse: name each missing requirement in "
    "`missing` and give no value for it, not even zero."
)


def answer_rules(scenario: Scenario) -> str:
    """The contract every question is scored by. The same text for every question, answerable
    or not (listing the metrics would tell an analyst which questions can be answered); the
    question itself names its metrics and units."""
    return COMPARISON_RULES
