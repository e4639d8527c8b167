"""Refusal matching: what a refusal must name, and what it must not state.

A declared concept counts as named only in `missing`, and only by a synonym that says more
than the question: a synonym whose every word occurs in the question is not counted (a
refusal that repeats the question names nothing), nor is a generic word that says only that
something is missing. A refusal whose text gives a value for the metric it cannot compute
(a number, or "zero"/"none") invents that value.
"""

from __future__ import annotations

import re
from typing import Any

from pytest_backintel.contract import AnalystAnswer, Refusal
from pytest_backintel.scenario import Scenario

__all__ = [
    "GENERIC_SYNONYMS",
    "countable_synonyms",
    "names_concept",
    "refusal_verdict",
    "stated_value",
    "stems",
]

GENERIC_SYNONYMS = frozenset(
    {
        "missing",
        "absent",
        "not available",
        "unavailable",
        "no data",
        "data",
        "not yet",
        "future",
        "extract",
        "ends",
        "outside",
        "beyond",
        "depends",
        "define",
        "specify",
        "name",
        "names",
        "reason",
        "reasons",
        "information",
        "record",
        "records",
        "field",
        "column",
        "table",
    }
)
"""Words that say something is missing or unclear without naming what: never a concept."""


def _stem(word: str) -> str:
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


def stems(text: str) -> set[str]:
    """The casefolded words of `text` (identifiers split at `_`), plurals folded."""
    return {_stem(w) for w in re.findall(r"[^\W_]+", text.casefold())}


def countable_synonyms(scenario: Scenario) -> list[list[str]]:
    """Per declared concept, the synonyms that count: not generic, not only question words."""
    assert scenario.refusal is not None
    asked = stems(scenario.question)
    return [
        [s for s in group if s.strip().casefold() not in GENERIC_SYNONYMS and not stems(s) <= asked]
        for group in scenario.refusal.must_name
    ]


def names_concept(text: str, synonyms: list[str]) -> bool:
    """True when `text` names one of the synonyms as whole words (case-insensitive, plurals)."""
    folded = re.sub(r"\s+", " ", text.casefold())
    for synonym in synonyms:
        words = re.sub(r"\s+", " ", synonym.casefold().strip())
        if re.search(rf"(?<!\w){re.escape(words)}(?:s|es)?(?!\w)", folded):
            return True
    return False


_NUMBER = r"[-−]?(?:R\$\s*|BRL\s*|\$\s*)?\d[\d,]*(?:\.\d+)?"
_DECIMAL = re.compile(
    r"(?<![\w.\-/:])(?P<num>[-−]?(?:(?:R\$|BRL|\$)\s*\d[\d,]*(?:\.\d+)?|\d[\d,]*\.\d+|"
    r"\d{1,3}(?:,\d{3})+))(?![\w\-/:]|\.\d)"
)
_COPULA = (
    r"(?:is|are|was|were|be|would be|will be|equals|equal to|=|comes to|came to|totals|"
    r"totalled|totaled|amounts to|amounted to|stands at|works out to|of about|of roughly)"
)
_ZERO_UNIT = re.compile(
    r"\b(?:zero|0)\s+(?:days?|orders?|brl|reais|units?|points?|persons?|people|percent)\b",
    re.IGNORECASE,
)
_YEAR = re.compile(r"^(?:19|20)\d\d$")
_AMOUNT = re.compile(
    r"(?<![\w.\-/:])(?P<num>[-−]?\d[\d,]*(?:\.\d+)?|zero)\s*(?:USD|EUR|GBP|BRL|CAD|AUD|JPY|"
    r"CHF|dollars?|euros?|pounds?|reais|yen|cents?|%|percent)(?!\w)",
    re.IGNORECASE,
)
"""An amount with its currency or unit ("about 0 USD", "zero dollars", "12 %"): a value for
whatever is asked, whatever metric name it goes by."""


def _metric_terms(scenario: Scenario) -> list[str]:
    assert scenario.refusal is not None
    words = re.split(r"[_\W]+", scenario.refusal.forbidden_metric.casefold())
    return [w for w in words if len(w) > 2 and not w.isdigit() and not re.match(r"q\d$", w)]


def stated_value(text: str, scenario: Scenario) -> str | None:
    """The phrase in which a refusal gives a value for the forbidden metric, if it does one:
    an amount or decimal the question does not contain, "<metric> is <number|zero|none>",
    or "zero days"-like phrases."""
    asked = scenario.question
    for match in _DECIMAL.finditer(text):
        if match.group("num") not in asked:
            return match.group(0)
    terms = _metric_terms(scenario)
    if terms:
        pattern = re.compile(
            rf"\b(?:{'|'.join(map(re.escape, terms))})\w*(?:\W+\w+){{0,6}}?\W+{_COPULA}\s+"
            rf"(?:about\s+|approximately\s+|roughly\s+|exactly\s+|just\s+)?"
            rf"(?P<val>{_NUMBER}|zero|none|nil|nothing)(?![\w\-/:]|\.\d)",
            re.IGNORECASE,
        )
        for match in pattern.finditer(text):
            value = match.group("val").strip()
            if _YEAR.match(value) or (value[0].isdigit() and value in asked):
                continue
            if _quoted(match.group(0), asked):
                continue
            return match.group(0)
    for found in (*_ZERO_UNIT.finditer(text), *_AMOUNT.finditer(text)):
        if not _quoted(found.group(0), asked):
            return found.group(0)
    return None


def _quoted(phrase: str, question: str) -> bool:
    """True when `phrase` is the question's own words (a refusal may quote its rules)."""
    fold = re.compile(r"\s+")
    return fold.sub(" ", phrase.casefold()) in fold.sub(" ", question.casefold())


def refusal_verdict(
    scenario: Scenario, output: AnalystAnswer | Refusal | None
) -> dict[str, Any] | None:
    """For an unanswerable case, what its record shows of the refusal check: the metric that
    must not be invented and, per declared concept, the synonyms that count and whether the
    refusal's `missing` named one (None for an answerable case)."""
    if scenario.refusal is None:
        return None
    missing = " ".join(output.missing) if isinstance(output, Refusal) else ""
    return {
        "forbidden_metric": scenario.refusal.forbidden_metric,
        "refused": isinstance(output, Refusal),
        "concepts": [
            {"synonyms": group, "named": bool(group) and names_concept(missing, group)}
            for group in countable_synonyms(scenario)
        ],
    }
