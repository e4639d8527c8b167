"""Building one split of the acceptance suite: stores, cross-checked references, manifest."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_backintel.scenario import Scenario
from scenarios.acceptance import ledgers, monitoring, payments, pricing, replay, reports
from scenarios.acceptance.checks import AcceptanceBuildError, cross_check, json_value
from scenarios.acceptance.manifest import SUITE, Manifest, ManifestCase, StoreRecord
from scenarios.acceptance.model import SPLITS, Case, SplitName, Variant
from scenarios.acceptance.storage import fingerprint, write_parquet, write_sqlite

__all__ = [
    "BUILDER_VERSION",
    "CASE_BUILDERS",
    "DEFAULT_SEED",
    "FAMILIES",
    "AcceptanceSettings",
    "build_acceptance",
    "opaque_name",
    "scenario_id",
]

BUILDER_VERSION = 1
"""Bump when the builder's output changes for the same settings (and regenerate manifests)."""
DEFAULT_SEED = 20261110
ANSWERABLE, NEGATIVE = 13, 4

CASE_BUILDERS: tuple[Callable[[Variant], list[Case]], ...] = (
    payments.signed_revenue,
    ledgers.complete_ledger,
    ledgers.missing_ledger,
    ledgers.partial_ledger,
    ledgers.zero_profit,
    payments.repeated_export_rows,
    reports.delivery_review_report,
    reports.repeat_purchasing_report,
    reports.causal_review,
    monitoring.stable_and_shifted,
    replay.delayed_observations,
    replay.duplicate_shipments,
    replay.current_period_unobserved,
    pricing.sales_mix,
)
"""One builder per case family of the specification's table, in its order."""

FAMILIES = (
    "signed_revenue",
    "full_period_cost_ledger",
    "missing_expense_ledger",
    "partially_covered_expense_ledger",
    "zero_net_profit",
    "repeated_export_rows",
    "delivery_review_report",
    "repeat_purchasing_report",
    "causal_review_improvement",
    "stable_shifted_delivery",
    "delayed_observations",
    "duplicate_shipment_export",
    "entire_current_period_unobserved",
    "sales_mix_price_change",
)


@dataclass(frozen=True)
class AcceptanceSettings:
    """Where the stores are written and the seed every value is drawn from."""

    data_dir: Path
    seed: int = DEFAULT_SEED


def opaque_name(seed: int, split: str, key: str) -> str:
    """A store file name that reveals neither the case nor its answerability."""
    digest = hashlib.sha256(f"{SUITE}|{seed}|{split}|{key}".encode()).hexdigest()
    return f"bi_{digest[:12]}"


def scenario_id(split: str, key: str) -> str:
    return f"acc-{'dev' if split == 'development' else 'res'}-{key}"


def _scenario(split: SplitName, case: Case) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": scenario_id(split, case.key),
        "version": 1,
        "title": case.title,
        "question": case.question,
        "dataset": {"world": SUITE, "snapshot": f"{split}-{case.key}"},
        "split": split,
        "level": case.level,
        "family": case.family,
        "answerable": case.answerable,
    }
    if case.answerable:
        data["metrics"] = list(case.metrics)
        data["check_sql"] = case.check_sql
    else:
        data["refusal"] = case.refusal
    try:
        scenario = Scenario.model_validate(data)
    except ValueError as exc:
        raise AcceptanceBuildError(f"case {data['id']}: invalid scenario: {exc}") from exc
    dumped: dict[str, Any] = scenario.model_dump(mode="json", exclude_none=True)
    return dumped


def _check_coverage(split: str, cases: list[Case]) -> None:
    answerable = sum(c.answerable for c in cases)
    families = Counter(c.family for c in cases)
    keys = Counter(c.key for c in cases)
    problems = []
    if (answerable, len(cases) - answerable) != (ANSWERABLE, NEGATIVE):
        problems.append(
            f"{answerable} answerable and {len(cases) - answerable} negative cases "
            f"(required: {ANSWERABLE} and {NEGATIVE})"
        )
    if set(families) != set(FAMILIES):
        problems.append(f"families {sorted(families)} differ from the required {sorted(FAMILIES)}")
    if any(n > 1 for n in keys.values()):
        problems.append(f"repeated case keys {sorted(k for k, n in keys.items() if n > 1)}")
    if problems:
        raise AcceptanceBuildError(f"{SUITE}/{split}: " + "; ".join(problems))


def _case_tables(case: Case, case_id: str) -> None:
    names = [t.name for t in case.tables]
    if len(set(names)) != len(names):
        raise AcceptanceBuildError(f"case {case_id}: table names repeated: {names}")


def build_acceptance(settings: AcceptanceSettings, split: str = "development") -> Manifest:
    """Build every case of `split` under `<data_dir>/acceptance/<split>/` and return its
    manifest. Each answerable reference is cross-checked by its check SQL; any mismatch raises
    `AcceptanceBuildError` naming the case and metric."""
    if split not in SPLITS:
        raise ValueError(f"unknown acceptance split {split!r}; allowed: {', '.join(SPLITS)}")
    name: SplitName = "development" if split == "development" else "reserved"
    variant = Variant(name, settings.seed)
    try:
        cases = [case for build in CASE_BUILDERS for case in build(variant)]
    except ValueError as exc:
        raise AcceptanceBuildError(f"{SUITE}/{split}: planting failed: {exc}") from exc
    _check_coverage(split, cases)
    folder = settings.data_dir / "acceptance" / split
    entries = []
    for case in cases:
        case_id = scenario_id(name, case.key)
        _case_tables(case, case_id)
        scenario = _scenario(name, case)
        opaque = opaque_name(settings.seed, split, case.key)
        db = folder / f"{opaque}.sqlite"
        write_sqlite(case.tables, db)
        write_parquet(case.tables, folder / f"{opaque}.parquet")
        reference: dict[str, int | float | str] = {}
        if case.answerable:
            if case.reference is None or case.check_sql is None:
                raise AcceptanceBuildError(f"case {case_id}: answerable without reference/check")
            cross_check(case_id, db, case.check_sql, case.metrics, case.reference)
            kinds = {str(m["name"]): str(m["kind"]) for m in case.metrics}
            reference = {k: json_value(kinds[k], v) for k, v in sorted(case.reference.items())}
        elif case.reference:
            raise AcceptanceBuildError(f"case {case_id}: a negative case must have no reference")
        prints = fingerprint(db)
        store = StoreRecord(
            file=f"acceptance/{split}/{opaque}.sqlite",
            tables=tuple(sorted(t.name for t in case.tables)),
            logical_sha256=prints.logical,
            physical_sha256=prints.physical,
        )
        entries.append(ManifestCase(scenario, reference, store, case.planting, case.conditions))
    return Manifest(SUITE, split, settings.seed, BUILDER_VERSION, tuple(entries))


def case_tables(split: str, key: str, seed: int = DEFAULT_SEED) -> Case:
    """The in-memory case `key` of `split` (its tables and declarations), without writing."""
    name: SplitName = "development" if split == "development" else "reserved"
    variant = Variant(name, seed)
    for build in CASE_BUILDERS:
        for case in build(variant):
            if case.key == key:
                return case
    raise KeyError(f"{SUITE}/{split} has no case {key!r}")
