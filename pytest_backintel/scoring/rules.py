"""The answer contract and comparison rules, stated in the task every analyst receives, so a
custom analyst is measured on the same terms as the built-in one."""

from __future__ import annotations

from pytest_backintel.sandbox.seed import SANDBOX_SEED, SEED_ENV
from pytest_backintel.scenario import Scenario
from pytest_backintel.tolerance import TOLERANCE

__all__ = ["COMPARISON_RULES", "PREDICTION_RULES", "answer_rules"]

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


PREDICTION_RULES = (
    "Predictions: the cited program is run again by the harness, on the store, on a copy whose "
    "training labels are permuted and on a copy whose scoring features are shuffled between "
    "entities; it must reproduce the reported predictions on the store and must not keep its "
    f"edge on those copies. Every Python run has the seed fixed by the harness: {SEED_ENV}="
    f"{SANDBOX_SEED} and PYTHONHASHSEED={SANDBOX_SEED} in the environment, and `random` and "
    "NumPy's global generator (what scikit-learn uses when random_state is None) seeded with it "
    "on import; seed any generator of your own."
)


def answer_rules(scenario: Scenario) -> str:
    """The contract every question is scored by. The same text for every question, answerable
    or not (listing the metrics would tell an analyst which questions can be answered); the
    question itself names its metrics and units. A prediction question (which says so itself)
    also gets how its program is re-run and the seed the harness fixes."""
    if scenario.prediction is not None:
        return f"{COMPARISON_RULES} {PREDICTION_RULES}"
    return COMPARISON_RULES
