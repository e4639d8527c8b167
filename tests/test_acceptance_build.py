"""The acceptance suite v1 builder: reproducible stores, cross-checked references, manifests."""

from __future__ import annotations

import dataclasses
import re
import sqlite3
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_backintel.scenario import Scenario
from scenarios.acceptance import (
    AcceptanceBuildError,
    AcceptanceSettings,
    Manifest,
    build_acceptance,
    load_manifest,
)
from scenarios.acceptance import builder as builder_module
from scenarios.acceptance.builder import FAMILIES
from scenarios.acceptance.checks import cross_check
from scenarios.acceptance.model import Case, Variant
from scenarios.acceptance.sealing import build_reserved, repeats
from scenarios.acceptance.storage import write_sqlite

SPLITS = ("development", "reserved")
TEST_SECRET = b"test-only secret, not the evaluator's: 0001"
"""The reserved variant these tests build (the evaluator's secret is never in the repository)."""


def _build(settings_: AcceptanceSettings, split: str) -> Manifest:
    if split == "reserved":
        return build_reserved(TEST_SECRET, settings_.data_dir)
    return build_acceptance(settings_, split)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Manifest]]:
    data_dir = tmp_path_factory.mktemp("acceptance-a")
    settings_ = AcceptanceSettings(data_dir)
    return data_dir, {s: _build(settings_, s) for s in SPLITS}


def _rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _by_key(manifest: Manifest) -> dict[str, Any]:
    return {c.snapshot.split("-", 1)[1]: c for c in manifest.cases}


def test_two_builds_are_byte_identical_and_match_the_committed_manifests(
    built: tuple[Path, dict[str, Manifest]], tmp_path: Path
) -> None:
    first_dir, first = built
    for split in SPLITS:
        again = _build(AcceptanceSettings(tmp_path), split)
        assert again.to_json() == first[split].to_json()
    committed = load_manifest("development").to_json()
    assert first["development"].to_json() == committed, "committed manifest is stale"
    files = sorted(p.relative_to(first_dir) for p in first_dir.rglob("*.sqlite"))
    assert len(files) == 34
    for rel in files:
        assert (first_dir / rel).read_bytes() == (tmp_path / rel).read_bytes(), rel


def test_a_different_seed_changes_values_but_not_the_shape(tmp_path: Path) -> None:
    other = build_acceptance(AcceptanceSettings(tmp_path, seed=7), "development")
    committed = load_manifest("development")
    assert [c.id for c in other.cases] == [c.id for c in committed.cases]
    assert [c.reference for c in other.cases] != [c.reference for c in committed.cases]


@pytest.mark.parametrize("split", SPLITS)
def test_each_split_has_13_answerable_and_4_negative_cases_over_all_14_families(
    built: tuple[Path, dict[str, Manifest]], split: str
) -> None:
    manifest = built[1][split]
    scenarios = [Scenario.model_validate(c.scenario) for c in manifest.cases]
    assert len(scenarios) == 17
    assert sum(s.answerable for s in scenarios) == 13
    negatives = sorted(s.family for s in scenarios if not s.answerable)
    assert negatives == sorted(
        [
            "missing_expense_ledger",
            "partially_covered_expense_ledger",
            "causal_review_improvement",
            "entire_current_period_unobserved",
        ]
    )
    assert {s.family for s in scenarios} == set(FAMILIES)
    assert len(FAMILIES) == 14
    assert {s.split.value for s in scenarios} == {split}
    assert all(s.level in (2, 3, 5, 6) for s in scenarios)
    assert all(s.dataset.world == "acceptance-v1" for s in scenarios)
    assert len({s.id for s in scenarios}) == 17


@pytest.mark.parametrize("split", SPLITS)
def test_every_reference_equals_its_check_sql_and_negatives_have_none(
    built: tuple[Path, dict[str, Manifest]], split: str
) -> None:
    data_dir, manifests = built
    for case in manifests[split].cases:
        scenario = case.to_scenario()
        if not scenario.answerable:
            assert case.reference == {}
            assert scenario.refusal is not None
            assert scenario.refusal.must_name
            assert case.conditions == scenario.refusal.conditions
            continue
        assert scenario.check_sql is not None
        conn = sqlite3.connect(f"file:{data_dir / case.store.file}?mode=ro", uri=True)
        cursor = conn.execute(scenario.check_sql)
        names = [d[0] for d in cursor.description]
        row = dict(zip(names, cursor.fetchone(), strict=True))
        conn.close()
        assert sorted(row) == sorted(case.reference) == sorted(m.name for m in scenario.metrics)
        for metric in scenario.metrics:
            expected, got = case.reference[metric.name], row[metric.name]
            if metric.kind.value in ("count", "text"):
                assert got == expected, (case.id, metric.name)
            else:
                assert isinstance(expected, int | float)
                assert abs(got - expected) <= 1e-9, (case.id, metric.name)


def test_zero_profit_is_numeric_zero_and_missing_ledger_has_no_value(
    built: tuple[Path, dict[str, Manifest]],
) -> None:
    for manifest in built[1].values():
        cases = _by_key(manifest)
        zero = cases["zero-profit"]
        assert zero.reference == {"net_profit": 0}
        assert type(zero.reference["net_profit"]) is int
        assert zero.scenario["answerable"] is True
        missing = cases["missing-ledger"]
        assert missing.reference == {}
        assert missing.scenario["answerable"] is False
        assert missing.scenario["refusal"]["forbidden_metric"] == "net_profit"
        assert cases["complete-ledger"].reference["net_profit"] != 0


def test_each_store_holds_only_its_own_tables_and_complete_ledgers_only_where_intended(
    built: tuple[Path, dict[str, Manifest]],
) -> None:
    data_dir, manifests = built
    for split, manifest in manifests.items():
        variant = Variant("development" if split == "development" else "reserved", 0)
        expenses, coverage = variant.table("expenses"), variant.table("coverage")
        files = [c.store.file for c in manifest.cases]
        assert len(set(files)) == len(files)
        complete = set()
        for key, case in _by_key(manifest).items():
            db = data_dir / case.store.file
            tables = sorted(r[0] for r in _rows(db, "SELECT name FROM sqlite_master"))
            assert tables == list(case.store.tables), key
            if expenses in tables:
                status = _rows(db, f"SELECT status FROM {coverage} WHERE ledger = 'expenses'")
                if status and all(s == ("closed",) for s in status):
                    complete.add(key)
        assert complete == {"complete-ledger", "zero-profit"}, split
        missing = data_dir / _by_key(manifest)["missing-ledger"].store.file
        assert not _rows(missing, f"SELECT * FROM {coverage} WHERE ledger = 'expenses'")


LEAKY = re.compile(
    r"missing|partial|unanswer|negative|refus|reference|answer|label|expected|truth|"
    r"zero|unobserved|causal|duplicate|repeated|planted|trap|mix_only|acceptance",
    re.IGNORECASE,
)


def test_store_files_tables_and_columns_are_opaque(built: tuple[Path, dict[str, Manifest]]) -> None:
    data_dir, manifests = built
    for manifest in manifests.values():
        for case in manifest.cases:
            assert re.fullmatch(
                r"acceptance/(development|reserved)/bi_[0-9a-f]{12}\.sqlite", case.store.file
            )
            db = data_dir / case.store.file
            for (table,) in _rows(db, "SELECT name FROM sqlite_master"):
                assert not LEAKY.search(table), (case.id, table)
                for column in _rows(db, f"SELECT name FROM pragma_table_info('{table}')"):
                    assert not LEAKY.search(column[0]), (case.id, table, column)


def test_the_leak_pattern_rejects_revealing_names() -> None:
    assert LEAKY.search("missing_costs")
    assert LEAKY.search("expected_answer")
    assert not LEAKY.search("expense_postings")
    assert not LEAKY.search("orders")


def test_questions_do_not_say_whether_data_is_missing(
    built: tuple[Path, dict[str, Manifest]],
) -> None:
    hints = re.compile(
        r"missing|not available|unavailable|unanswerable|incomplete|no expense|"
        r"not loaded|cannot",
        re.IGNORECASE,
    )
    for manifest in built[1].values():
        cases = _by_key(manifest)
        for case in cases.values():
            assert not hints.search(case.scenario["question"]), case.id
        same = ("complete-ledger", "missing-ledger", "zero-profit")
        shapes = {re.sub(r"for .*? inclusive\)", "", cases[k].scenario["question"]) for k in same}
        assert len(shapes) == 1, "answerable and negative profit questions must read alike"


def test_reserved_variants_change_values_periods_and_table_names(
    built: tuple[Path, dict[str, Manifest]],
) -> None:
    dev, res = (_by_key(built[1][s]) for s in SPLITS)
    assert dev.keys() == res.keys()
    dev_tables = {t for c in dev.values() for t in c.store.tables}
    res_tables = {t for c in res.values() for t in c.store.tables}
    assert not dev_tables & res_tables
    for key in dev:
        assert dev[key].scenario["question"] != res[key].scenario["question"], key
        assert dev[key].store.logical_sha256 != res[key].store.logical_sha256, key
    # every value differs unless the specification fixes it (zeros, 2/2 -> 4/0, yes/no)
    assert repeats(built[1]["development"], built[1]["reserved"]) == []


def _tampered(build: Callable[[Variant], list[Case]], metric: str, delta: Any) -> Any:
    def wrapper(v: Variant) -> list[Case]:
        out = []
        for case in build(v):
            if case.reference and metric in case.reference:
                ref = dict(case.reference)
                ref[metric] = ref[metric] + delta
                case = dataclasses.replace(case, reference=ref)
            out.append(case)
        return out

    return wrapper


@pytest.mark.parametrize(
    ("target", "metric", "delta", "case_id"),
    [
        ("signed_revenue", "net_revenue", Decimal("0.01"), "acc-dev-signed-revenue"),
        ("repeated_export_rows", "payment_events", 1, "acc-dev-repeated-export-rows"),
        (
            "delivery_review_report",
            "late_share",
            Fraction(1, 10**6),
            "acc-dev-delivery-review-report",
        ),
    ],
)
def test_a_changed_reference_aborts_the_build_naming_case_and_metric(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    target: str,
    metric: str,
    delta: Any,
    case_id: str,
) -> None:
    builders = tuple(
        _tampered(b, metric, delta) if b.__name__ == target else b
        for b in builder_module.CASE_BUILDERS
    )
    monkeypatch.setattr(builder_module, "CASE_BUILDERS", builders)
    with pytest.raises(AcceptanceBuildError, match=rf"case {case_id}: metric {metric}:"):
        build_acceptance(AcceptanceSettings(tmp_path), "development")


def test_a_case_count_below_the_specification_aborts_the_build(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(builder_module, "CASE_BUILDERS", builder_module.CASE_BUILDERS[:-1])
    with pytest.raises(AcceptanceBuildError, match="11 answerable and 4 negative"):
        build_acceptance(AcceptanceSettings(tmp_path), "development")


@settings(max_examples=40, deadline=None)
@given(cents=st.integers(-(10**9), 10**9), off=st.integers(1, 10**6))
def test_cross_check_accepts_float_rounding_and_rejects_a_cent(
    tmp_path_factory: pytest.TempPathFactory, cents: int, off: int
) -> None:
    db = tmp_path_factory.mktemp("x") / "x.sqlite"
    write_sqlite([], db)
    value = Decimal(cents).scaleb(-2)
    spec = [{"name": "amount", "kind": "currency"}]
    cross_check("c", db, f"SELECT {float(value)!r} AS amount", spec, {"amount": value})
    wrong = value + Decimal(off).scaleb(-2)
    with pytest.raises(AcceptanceBuildError, match="case c: metric amount"):
        cross_check("c", db, f"SELECT {float(wrong)!r} AS amount", spec, {"amount": value})


def test_delayed_first_snapshot_hides_post_cutoff_deliveries(
    built: tuple[Path, dict[str, Manifest]],
) -> None:
    data_dir, manifests = built
    for split, manifest in manifests.items():
        cases = _by_key(manifest)
        first, nxt = cases["late-arrivals-first"], cases["late-arrivals-next"]
        orders = Variant("development" if split == "development" else "reserved", 0).table("orders")
        cutoff, next_cutoff = first.planting["schedule"]
        unseen: dict[str, str] = first.planting["unseen_event_times"]
        assert len(unseen) == 2
        assert all(cutoff < t < next_cutoff for t in unseen.values())
        db1, db2 = data_dir / first.store.file, data_dir / nxt.store.file
        assert not _rows(
            db1,
            f"SELECT * FROM {orders} WHERE delivered_at >= '{cutoff}' "
            f"OR purchased_at >= '{cutoff}'",
        )
        ids = ", ".join(f"'{o}'" for o in unseen)
        hidden = _rows(
            db1,
            f"SELECT order_id, order_status, delivered_at FROM {orders} WHERE order_id IN ({ids})",
        )
        assert sorted(hidden) == sorted((o, "shipped", None) for o in unseen)
        shown = _rows(db2, f"SELECT order_id, delivered_at FROM {orders} WHERE order_id IN ({ids})")
        assert dict(shown) == unseen
        assert "unseen_event_times" not in nxt.planting
        assert first.reference["current_pending_orders"] == 2
        assert first.reference["material_alert"] == "no"
        assert nxt.reference["current_delivered_orders"] == 4
        assert nxt.reference["current_pending_orders"] == 0
        assert nxt.reference["material_alert"] == "yes"
        assert (
            first.reference["baseline_mean_delivery_days"]
            == nxt.reference["baseline_mean_delivery_days"]
        )


def test_false_alarm_traps_are_planted(built: tuple[Path, dict[str, Manifest]]) -> None:
    for manifest in built[1].values():
        cases = _by_key(manifest)
        assert cases["stable-delivery"].reference["material_alert"] == "no"
        assert cases["shifted-delivery"].reference["material_alert"] == "yes"
        dup = cases["duplicate-shipments"]
        assert dup.reference["material_alert"] == "no"
        assert (
            dup.planting["row_level_current_mean"]
            > 1.2 * dup.reference["baseline_mean_delivery_days"]
        )
        mix = cases["mix-only-prices"]
        assert mix.reference["price_change"] == 0
        assert mix.reference["price_alert"] == "no"
        assert mix.planting["naive_average_price_change"] > 0.05
        assert cases["actual-price-change"].reference["price_alert"] == "yes"
