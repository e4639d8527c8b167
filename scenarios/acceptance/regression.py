"""The original-regression manifest: the six original questions over the Olist world.

Three original failures (the missing-cost query loop, the September 2017 repeat report whose
evidence did not run, the March 2018 delivery report that repeated metrics) and three healthy
controls (ordinary repeat purchasing, delivery/satisfaction report, delivered-order count).
References are computed here by plain Python over the world's canonical Parquet (read with
pyarrow, exact Fraction/datetime arithmetic), cross-checked by each case's SQLite `check_sql`.
Every case is bound explicitly to the SQLite store of world `olist`, snapshot `base`, with the
data fingerprints it was computed from, and preselects two trials.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from pytest_backintel.scenario import Scenario
from scenarios.acceptance.checks import AcceptanceBuildError, cross_check, json_value
from scenarios.acceptance.model import RefValue
from scenarios.acceptance.regression_cases import CASES, RegressionCase
from scenarios.world_base import World, get_world
from stores.fingerprint import file_sha256

__all__ = [
    "REGRESSION_PATH",
    "TRIALS",
    "RegressionDataError",
    "build_regression",
    "load_regression",
    "verify_regression_data",
]

REGRESSION_PATH = Path(__file__).resolve().parent / "original-regression.json"
TRIALS = 2
FMT = "%Y-%m-%d %H:%M:%S"
Rows = list[dict[str, Any]]


class RegressionDataError(Exception):
    """The Olist data differs from the fingerprints the regression references were built on."""


def _read(parquet_dir: Path, table: str) -> Rows:
    rows: Rows = pq.read_table(parquet_dir / f"{table}.parquet").to_pylist()
    return rows


def _ts(text: str) -> datetime:
    return datetime.strptime(text, FMT)


def _delivered_cohort(orders: Rows, lo: str, hi: str) -> Rows:
    return [
        o
        for o in orders
        if o["order_status"] == "delivered"
        and o["order_delivered_customer_date"] is not None
        and lo <= o["order_purchase_timestamp"] < hi
    ]


def delivery_report(pq_dir: Path, lo: str, hi: str, with_unreviewed: bool) -> dict[str, RefValue]:
    """Delivered, timestamped orders purchased in [lo, hi): counts, exact mean days, strict
    lateness, mean over review rows, and (optionally) orders without a review row."""
    cohort = _delivered_cohort(_read(pq_dir, "orders"), lo, hi)
    ids = {o["order_id"] for o in cohort}
    scores = [
        int(r["review_score"]) for r in _read(pq_dir, "order_reviews") if r["order_id"] in ids
    ]
    reviewed = {r["order_id"] for r in _read(pq_dir, "order_reviews")}
    seconds = sum(
        int(
            (
                _ts(o["order_delivered_customer_date"]) - _ts(o["order_purchase_timestamp"])
            ).total_seconds()
        )
        for o in cohort
    )
    late = sum(
        1
        for o in cohort
        if _ts(o["order_delivered_customer_date"]) > _ts(o["order_estimated_delivery_date"])
    )
    out: dict[str, RefValue] = {
        "delivered_orders": len(cohort),
        "mean_delivery_days": Fraction(seconds, 86400 * len(cohort)),
        "late_share": Fraction(late, len(cohort)),
        "average_review_score": Fraction(sum(scores), len(scores)),
    }
    if with_unreviewed:
        out["orders_without_review"] = len(ids - reviewed)
    return out


def repeat_report(pq_dir: Path, lo: str | None, hi: str | None) -> dict[str, RefValue]:
    """Persons (customer_unique_id) with distinct orders of any status purchased in [lo, hi)."""
    person = {c["customer_id"]: c["customer_unique_id"] for c in _read(pq_dir, "customers")}
    per: dict[str, set[str]] = {}
    for o in _read(pq_dir, "orders"):
        t = o["order_purchase_timestamp"]
        if (lo is None or t >= lo) and (hi is None or t < hi):
            per.setdefault(person[o["customer_id"]], set()).add(o["order_id"])
    n = len(per)
    return {
        "persons": n,
        "repeat_person_share": Fraction(sum(1 for s in per.values() if len(s) >= 2), n),
        "mean_orders_per_person": Fraction(sum(len(s) for s in per.values()), n),
    }


def delivered_count(pq_dir: Path) -> dict[str, RefValue]:
    return {
        "delivered_orders": sum(o["order_status"] == "delivered" for o in _read(pq_dir, "orders"))
    }


REFERENCES: dict[str, Callable[[Path], dict[str, RefValue]]] = {
    "reg-repeat-report-2017-09": lambda p: repeat_report(
        p, "2017-07-01 00:00:00", "2017-10-01 00:00:00"
    ),
    "reg-delivery-report-2018-03": lambda p: delivery_report(
        p, "2018-03-01 00:00:00", "2018-04-01 00:00:00", with_unreviewed=True
    ),
    "reg-control-repeat-purchasing": lambda p: repeat_report(p, None, None),
    "reg-control-delivery-satisfaction": lambda p: delivery_report(
        p, "2017-01-01 00:00:00", "2018-01-01 00:00:00", with_unreviewed=False
    ),
    "reg-control-delivered-orders": delivered_count,
}
"""Scenario id -> independent reference function over the canonical Parquet."""


def _binding(world: World, data_dir: Path) -> dict[str, Any]:
    files = world.ensure_built(data_dir)
    if files.sqlite_path is None:
        raise AcceptanceBuildError("world olist has no SQLite file to bind the regression to")
    parquet = {
        f"parquet/{p.name}": file_sha256(p) for p in sorted(files.parquet_dir.glob("*.parquet"))
    }
    return {
        "backend": "sqlite",
        "world": world.name,
        "snapshot": "base",
        "config": world.config,
        "data_hash": world.data_hash(files),
        "files": {files.sqlite_path.name: file_sha256(files.sqlite_path), **parquet},
    }


def _case(case: RegressionCase, pq_dir: Path, db: Path, binding: dict[str, Any]) -> dict[str, Any]:
    scenario = Scenario.model_validate(case.scenario)
    reference: dict[str, int | float | str] = {}
    if scenario.answerable:
        raw = REFERENCES[scenario.id](pq_dir)
        metrics = [m.model_dump(mode="json") for m in scenario.metrics]
        cross_check(scenario.id, db, scenario.check_sql or "", metrics, raw)
        kinds = {m.name: m.kind.value for m in scenario.metrics}
        reference = {k: json_value(kinds[k], v) for k, v in sorted(raw.items())}
    return {
        "scenario": scenario.model_dump(mode="json", exclude_none=True),
        "reference": reference,
        "trials": TRIALS,
        "role": case.role,
        "origin": case.origin,
        "store": {k: binding[k] for k in ("backend", "world", "snapshot", "data_hash")},
    }


def build_regression(data_dir: Path) -> dict[str, Any]:
    """The original-regression manifest over the Olist world built under `data_dir`."""
    world = get_world("olist")
    binding = _binding(world, data_dir)
    files = world.ensure_built(data_dir)
    db = files.sqlite_path
    assert db is not None  # checked by _binding
    return {
        "suite": "original-regression",
        "split": "regression",
        "binding": binding,
        "trial_plan": {
            "trials_per_case": TRIALS,
            "why": "the missing-cost question behaved differently across recorded runs; both "
            "trials of every case are kept and do not establish a population success rate",
        },
        "cases": [_case(c, files.parquet_dir, db, binding) for c in CASES],
    }


def to_json(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def load_regression(path: Path = REGRESSION_PATH) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def verify_regression_data(manifest: dict[str, Any], data_dir: Path) -> None:
    """Raise `RegressionDataError` when the Olist world's content or files differ from the
    manifest's binding (logical data hash first, then each file's sha256)."""
    expected = manifest["binding"]
    actual = _binding(get_world(str(expected["world"])), data_dir)
    problems = []
    if actual["config"] != expected["config"]:
        problems.append(f"world config {actual['config']} differs from {expected['config']}")
    if actual["data_hash"] != expected["data_hash"]:
        problems.append(
            f"logical data hash changed: manifest {expected['data_hash']}, "
            f"data {actual['data_hash']}"
        )
    for name, sha in sorted(expected["files"].items()):
        if actual["files"].get(name) != sha:
            problems.append(
                f"{name}: physical checksum changed: manifest {sha}, data "
                f"{actual['files'].get(name, 'missing')}"
            )
    if problems:
        raise RegressionDataError("original-regression: " + "; ".join(problems))
