"""Value comparison by metric kind: the only place tolerances live.

Counts are exact; currency agrees to half a minor unit (±0.005 in major units); ratios and
durations to 1e-6 absolute; text exactly after declared normalisation; tables row by row with
declared key and order. No number is read out of a string, signs are kept, NULL is never zero,
and booleans are not numbers.

The specs those comparisons read live here too, beside them: a requested metric
(`MetricSpec`, its `MetricKind` and table `ColumnSpec`s) and a prediction scenario's criteria
against a baseline (`PredictionSpec`). `pytest_backintel.scenario` re-exports them; their
attribute docstrings describe their fields in the scenario JSON Schema.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "CRITERION",
    "HIGHER_IS_BETTER",
    "NOISE",
    "PREDICTION_METRICS",
    "TOLERANCE",
    "ColumnSpec",
    "Comparison",
    "MetricKind",
    "MetricSpec",
    "PredictionSpec",
    "compare_metric",
    "compare_scalar",
    "reproduces",
    "tolerance_for",
]


class _Strict(BaseModel):
    """The scenario model's base (`pytest_backintel.scenario`): no unknown keys, frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


TextStep = Literal["strip", "casefold", "collapse_whitespace"]


class MetricKind(StrEnum):
    """How a metric is compared: counts exact, currency to half a minor unit, ratios and
    durations to 1e-6 absolute, text exact after normalisation, tables row by row."""

    COUNT = "count"
    CURRENCY = "currency"
    RATIO = "ratio"
    DURATION = "duration"
    TEXT = "text"
    TABLE = "table"


class ColumnSpec(_Strict):
    """One column of a table metric."""

    name: str = Field(min_length=1)
    kind: Literal["count", "currency", "ratio", "duration", "text"]


class MetricSpec(_Strict):
    """A requested metric: reported exactly once, compared by its kind."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    """The name the answer must use (snake_case)."""
    kind: MetricKind
    unit: str = Field(min_length=1)
    """The declared unit, e.g. `orders`, `BRL`, `ratio`, `days`."""
    description: str = ""
    columns: list[ColumnSpec] = Field(default_factory=list)
    """Table metrics only: the columns, each compared by its own kind."""
    key: list[str] = Field(default_factory=list)
    """Table metrics only: columns that identify a row."""
    ordered: bool = False
    """Table metrics only: whether row order is part of the answer."""
    normalize: list[TextStep] = Field(default_factory=lambda: list[TextStep](["strip"]))
    """Text values (and text cells): normalisations applied before exact comparison."""

    @model_validator(mode="after")
    def _table_fields(self) -> MetricSpec:
        is_table = self.kind is MetricKind.TABLE
        if is_table and not self.columns:
            raise ValueError("a table metric needs `columns`")
        if not is_table and (self.columns or self.key):
            raise ValueError("`columns` and `key` belong to table metrics only")
        names = {c.name for c in self.columns}
        unknown = [k for k in self.key if k not in names]
        if unknown:
            raise ValueError(f"key columns {unknown} are not among the columns {sorted(names)}")
        return self


PREDICTION_METRICS = {
    "classification": ("auroc", "average_precision", "log_loss", "brier"),
    "regression": ("mae",),
}
"""The metrics a prediction criterion may name, per task kind (all computed by scikit-learn)."""
HIGHER_IS_BETTER = frozenset({"auroc", "average_precision"})
CRITERION = re.compile(
    r"^\s*(?P<metric>[a-z_]+)\s*(?P<op>>=|<=)\s*baseline"
    r"(?:\s*(?P<sign>[+-])\s*(?P<margin>\d+(?:\.\d+)?))?\s*$"
)
"""A pass criterion: `<metric> >= baseline + <margin>` or `<metric> <= baseline - <margin>`."""


class PredictionSpec(_Strict):
    """A prediction scenario: the store holds a training cohort with labels and a scoring
    cohort without them; the scoring labels stay with the evaluator (the reference), loaded
    only after the analyst answered. The answer's one table metric holds a prediction per
    scoring entity, cited by the Python program that trained and predicted."""

    kind: Literal["classification", "regression"]
    """`classification`: a probability of the positive class (label 1); `regression`: a value."""
    entity: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    """The unit of prediction: the key column of the predictions table and both cohorts."""
    value: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    """The predictions table's value column (a probability or a predicted value)."""
    training_table: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    scoring_table: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    target: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    """The label column of the training table (absent from the scoring table)."""
    baseline: Literal["prevalence", "median", "mean"]
    """The evaluator's simple baseline, computed from the training cohort: its prevalence
    (classification) or its median or mean label (regression), for every scoring entity."""
    criteria: list[str] = Field(min_length=1)
    """Pass criteria against the baseline, fixed before any run, all required, e.g.
    `auroc >= baseline + 0.05`, `log_loss <= baseline`, `mae <= baseline - 0.5`."""
    tolerance: float = Field(default=1e-6, ge=0)
    """How far the re-run program's predictions may be from the reported ones."""
    permutation_seed: int = Field(default=27, ge=0)
    """The seed of the copies the program is re-run on: training labels permuted, and scoring
    features shuffled between entities."""
    labels: str | None = Field(default=None, min_length=1)
    """Data of your own: the scoring cohort's hidden labels, a CSV file beside the scenario (a
    path relative to its folder) with the columns `entity` and `target`, never in the store;
    `backintel references build` locks them, with the baseline, in the lock file."""

    @model_validator(mode="after")
    def _criteria(self) -> PredictionSpec:
        allowed = PREDICTION_METRICS[self.kind]
        for text in self.criteria:
            match = CRITERION.match(text)
            if match is None or match["metric"] not in allowed:
                raise ValueError(
                    f"criterion {text!r}: write `<metric> >= baseline + <margin>` or "
                    f"`<metric> <= baseline - <margin>` with a {self.kind} metric "
                    f"({', '.join(allowed)})"
                )
        wanted = ("prevalence",) if self.kind == "classification" else ("median", "mean")
        if self.baseline not in wanted:
            raise ValueError(f"a {self.kind} baseline is one of {list(wanted)}")
        if self.value == self.entity:
            raise ValueError("`value` and `entity` must be different columns")
        return self


TOLERANCE: dict[str, Decimal] = {
    "count": Decimal(0),
    "currency": Decimal("0.005"),
    "ratio": Decimal("0.000001"),
    "duration": Decimal("0.000001"),
}


NOISE = Decimal("1e-9")
"""Evidence must reproduce a reported number to floating-point noise: relative to its size,
at least absolutely (counts exactly)."""


@dataclass(frozen=True)
class Comparison:
    ok: bool
    detail: str = ""


def tolerance_for(kind: str) -> float:
    """The absolute tolerance of a numeric kind (0 for count, text and table)."""
    return float(TOLERANCE.get(kind, Decimal(0)))


def _as_decimal(value: Any) -> Decimal | None:
    """A JSON number as Decimal via its shortest repr; None for anything that is not a number."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, Decimal):
        return value if value.is_finite() else None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        try:
            return Decimal(repr(value))
        except InvalidOperation:
            return None
    return None


def _normalise_text(value: str, steps: Sequence[str]) -> str:
    for step in steps:
        if step == "strip":
            value = value.strip()
        elif step == "casefold":
            value = value.casefold()
        elif step == "collapse_whitespace":
            value = re.sub(r"\s+", " ", value)
    return value


def compare_scalar(
    kind: str,
    expected: Any,
    got: Any,
    normalize: Sequence[str] = ("strip",),
    *,
    exact: bool = False,
) -> Comparison:
    """Compare one reported value with the reference under the kind's rule (`exact`: to
    floating-point noise instead of the kind's tolerance, for evidence against the answer)."""
    if expected is None or got is None:
        if expected is None and got is None:
            return Comparison(True)
        return Comparison(False, f"expected {expected!r}, got {got!r} (NULL is never a value)")
    if kind == "text":
        if not isinstance(got, str):
            return Comparison(False, f"expected text, got {type(got).__name__} {got!r}")
        ok = _normalise_text(got, normalize) == _normalise_text(str(expected), normalize)
        return Comparison(ok, "" if ok else f"expected {expected!r}, got {got!r}")
    exp, val = _as_decimal(expected), _as_decimal(got)
    if isinstance(got, bool):
        return Comparison(False, f"expected a number, got the boolean {got!r} (not a number)")
    if val is None:
        return Comparison(False, f"expected a number, got {type(got).__name__} {got!r}")
    if exp is None:
        return Comparison(False, f"reference {expected!r} is not a number")
    if kind == "count" and val != val.to_integral_value():
        return Comparison(False, f"expected a whole count {exp}, got {got!r}")
    tol = TOLERANCE[kind]
    if exact and kind != "count":
        tol = NOISE * max(Decimal(1), abs(exp))
    elif exact:
        tol = Decimal(0)
    diff = abs(val - exp)
    ok = diff <= tol
    rule = "not exactly: evidence must reproduce it" if exact else f"tolerance {tol}"
    return Comparison(ok, "" if ok else f"expected {exp}, got {val} (off by {diff}, {rule})")


def _row_key(row: dict[str, Any], key: Sequence[str]) -> tuple[str, ...]:
    return tuple(repr(row.get(k)) for k in key)


def _compare_rows(
    columns: Sequence[ColumnSpec],
    expected: dict[str, Any],
    got: dict[str, Any],
    normalize: Sequence[str],
    where: str,
    exact: bool = False,
) -> Comparison:
    for col in columns:
        if col.name not in got:
            return Comparison(False, f"{where}: column {col.name!r} is missing")
        cmp = compare_scalar(
            col.kind, expected.get(col.name), got[col.name], normalize, exact=exact
        )
        if not cmp.ok:
            return Comparison(False, f"{where}, column {col.name!r}: {cmp.detail}")
    return Comparison(True)


SHOWN_ROWS = 5
"""How many missing, extra or changed rows a table failure lists of each."""


def _listed(what: str, items: list[str]) -> str:
    more = f" and {len(items) - SHOWN_ROWS} more" if len(items) > SHOWN_ROWS else ""
    return f"{len(items)} {what}: {'; '.join(items[:SHOWN_ROWS])}{more}"


def _keyed(spec: MetricSpec, expected: list[Any], got: list[Any], exact: bool) -> Comparison:
    """Rows matched by key: every missing, extra and changed row (bounded), and for an
    ordered table the order."""
    by_key: dict[tuple[str, ...], dict[str, Any]] = {}
    for row in got:
        k = _row_key(row, spec.key)
        if k in by_key:
            return Comparison(False, f"key {dict(zip(spec.key, k, strict=True))} appears twice")
        by_key[k] = row
    wanted = {_row_key(e, spec.key): e for e in expected}

    def name(row: dict[str, Any]) -> str:
        return str({k: row.get(k) for k in spec.key})

    missing = [name(e) for k, e in wanted.items() if k not in by_key]
    extra = [name(g) for k, g in by_key.items() if k not in wanted]
    changed = []
    for k, e in wanted.items():
        if k in by_key:
            cmp = _compare_rows(spec.columns, e, by_key[k], spec.normalize, f"row {name(e)}", exact)
            if not cmp.ok:
                changed.append(cmp.detail)
    parts = []
    if missing:
        parts.append(_listed("missing row(s) with key", missing))
    if extra:
        parts.append(_listed("extra row(s) with key", extra))
    if changed:
        parts.append(_listed("changed row(s)", changed))
    if not parts and spec.ordered:
        order = [_row_key(r, spec.key) for r in got]
        if order != list(wanted):
            shown = [name(e) for e in expected][:SHOWN_ROWS]
            parts.append(f"rows out of order: expected {', '.join(shown)}")
    if len(got) != len(expected):
        parts.insert(0, f"expected {len(expected)} rows, got {len(got)}")
    return Comparison(not parts, "; ".join(parts))


def compare_table(spec: MetricSpec, expected: Any, got: Any, exact: bool = False) -> Comparison:
    """Row by row: rows matched by key (or position when ordered and keyless, or sorted when
    keyless); a failure lists the missing, extra and changed rows, a few of each."""
    if not isinstance(got, list) or not all(isinstance(r, dict) for r in got):
        return Comparison(False, f"expected rows (a list of objects), got {type(got).__name__}")
    if not isinstance(expected, list):
        return Comparison(False, "reference is not a table")
    if spec.key:
        return _keyed(spec, expected, got, exact)
    if len(got) != len(expected):
        return Comparison(False, f"expected {len(expected)} rows, got {len(got)}")
    pairs = list(zip(expected, got, strict=True))
    if not spec.ordered:
        keyed = [c.name for c in spec.columns]
        pairs = list(
            zip(
                sorted(expected, key=lambda r: _row_key(r, keyed)),
                sorted(got, key=lambda r: _row_key(r, keyed)),
                strict=True,
            )
        )
    changed = []
    for i, (e, g) in enumerate(pairs, 1):
        cmp = _compare_rows(spec.columns, e, g, spec.normalize, f"row {i}", exact)
        if not cmp.ok:
            changed.append(cmp.detail)
    return Comparison(not changed, _listed("changed row(s)", changed) if changed else "")


def compare_metric(spec: MetricSpec, expected: Any, got: Any) -> Comparison:
    """Compare a reported metric value with its reference under the metric's kind (a
    currency amount 100 times the reference is said to be in minor units)."""
    if spec.kind is MetricKind.TABLE:
        return compare_table(spec, expected, got)
    found = compare_scalar(spec.kind.value, expected, got, spec.normalize)
    if found.ok or spec.kind is not MetricKind.CURRENCY:
        return found
    exp, val = _as_decimal(expected), _as_decimal(got)
    if exp and val is not None and abs(val - exp * 100) <= TOLERANCE["currency"]:
        unit = spec.unit or "major units"
        return Comparison(
            False,
            f"{found.detail}: {val} is 100 times the reference, a value in cents (minor "
            f"units) where {unit} (major units) are asked",
        )
    return found


def reproduces(spec: MetricSpec, produced: Any, reported: Any) -> Comparison:
    """Whether evidence output `produced` is exactly the `reported` value (counts exactly,
    other numbers to floating-point noise): tolerance is never stacked on evidence."""
    if spec.kind is MetricKind.TABLE:
        return compare_table(spec, produced, reported, exact=True)
    return compare_scalar(spec.kind.value, produced, reported, spec.normalize, exact=True)
