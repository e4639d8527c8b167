"""Building blocks shared by every acceptance case: tables, case specs, split variants, values.

A case module turns a `Variant` (the split, its seed, its table names and periods) into one or
more `Case`s: the fixture records, the question, the requested metrics or the refusal
contract, the reference computed from the records with int/Decimal/Fraction/date arithmetic,
the separately written check SQL, and a declaration of what was planted and why.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal, TypeVar

__all__ = [
    "SPLITS",
    "TABLE_NAMES",
    "Case",
    "Ids",
    "RefValue",
    "SplitName",
    "Table",
    "Value",
    "Variant",
    "add_months",
    "cents",
    "day_seconds",
    "fmt_date",
    "fmt_ts",
    "mean_days",
    "metric",
    "midnight",
    "month_bounds",
    "month_label",
    "parse_ts",
    "ts_window",
]

SplitName = Literal["development", "reserved"]
SPLITS: tuple[SplitName, ...] = ("development", "reserved")

Value = int | str | Decimal | None
"""A stored cell: Decimal money is stored as SQLite REAL (two decimals), the rest as is."""
RefValue = int | Decimal | Fraction | str
"""A reference value before JSON: counts int, currency Decimal, ratios/durations Fraction."""

T = TypeVar("T")

TABLE_NAMES: dict[str, tuple[str, str]] = {
    "payments": ("payment_events", "settlement_lines"),
    "sales": ("sales_postings", "revenue_journal"),
    "expenses": ("expense_postings", "cost_journal"),
    "coverage": ("ledger_periods", "journal_close_status"),
    "orders": ("orders", "purchases"),
    "reviews": ("order_reviews", "purchase_feedback"),
    "customers": ("customers", "buyers"),
    "shipments": ("shipments", "dispatch_records"),
    "lines": ("sales_lines", "invoice_lines"),
    "products": ("products", "catalog_items"),
}
"""Role -> (development name, reserved name). Names are ordinary business names: they never
reveal the case, its family or whether it is answerable."""


@dataclass(frozen=True)
class Table:
    """One fixture table: name, (column, SQLite type) pairs and rows in insert order."""

    name: str
    columns: tuple[tuple[str, str], ...]
    rows: list[tuple[Value, ...]]

    def __post_init__(self) -> None:
        width = len(self.columns)
        bad = [i for i, row in enumerate(self.rows) if len(row) != width]
        if bad:
            raise ValueError(f"table {self.name}: rows {bad[:5]} do not have {width} cells")

    def column(self, name: str) -> int:
        return [c for c, _ in self.columns].index(name)


@dataclass(frozen=True)
class Case:
    """One acceptance case as built from its records (split-independent key)."""

    key: str
    """Stable within the suite, e.g. `signed-revenue`; the scenario id adds the split."""
    family: str
    level: int
    title: str
    question: str
    tables: tuple[Table, ...]
    conditions: str
    """The data condition the case tests (the missing-information condition when negative)."""
    planting: dict[str, Any]
    metrics: tuple[dict[str, Any], ...] = ()
    reference: dict[str, RefValue] | None = None
    check_sql: str | None = None
    refusal: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def answerable(self) -> bool:
        return self.refusal is None


def metric(name: str, kind: str, unit: str, description: str) -> dict[str, Any]:
    """A `MetricSpec` as a dict (text metrics compare after strip + casefold)."""
    spec: dict[str, Any] = {"name": name, "kind": kind, "unit": unit, "description": description}
    if kind == "text":
        spec["normalize"] = ["strip", "casefold"]
    return spec


@dataclass(frozen=True)
class Variant:
    """One split of the suite: its seed, table names, currency and periods."""

    split: SplitName
    seed: int

    def pick(self, development: T, reserved: T) -> T:
        return development if self.split == "development" else reserved

    @property
    def currency(self) -> str:
        return self.pick("BRL", "EUR")

    def table(self, role: str) -> str:
        dev, res = TABLE_NAMES[role]
        return self.pick(dev, res)

    def rng(self, key: str) -> random.Random:
        """A generator seeded by (seed, split, key): independent per case, stable across runs."""
        digest = hashlib.sha256(f"acceptance-v1|{self.seed}|{self.split}|{key}".encode())
        return random.Random(int.from_bytes(digest.digest()[:8], "big"))

    def size(self, key: str, development: int, low: int, high: int) -> int:
        """A structural count: `development` in that split; in the reserved split a count in
        [low, high] other than `development`, from its own generator (so the development
        stream, and the development manifest, stay as they are)."""
        if self.split == "development":
            return development
        choices = [n for n in range(low, high + 1) if n != development]
        return self.rng(f"{key}|size").choice(choices)


class Ids:
    """Unique opaque ids with a prefix, drawn from a case's generator."""

    def __init__(self, rng: random.Random, prefix: str) -> None:
        self.rng, self.prefix, self.seen = rng, prefix, set[str]()

    def __call__(self) -> str:
        while True:
            candidate = f"{self.prefix}{self.rng.getrandbits(40):010x}"
            if candidate not in self.seen:
                self.seen.add(candidate)
                return candidate


def cents(rng: random.Random, low: int, high: int) -> Decimal:
    """A two-decimal amount between `low` and `high` major units."""
    return Decimal(rng.randint(low * 100, high * 100)).scaleb(-2)


def month_bounds(year: int, month: int) -> tuple[date, date]:
    """The first day of the month and the first day of the next (exclusive end)."""
    start = date(year, month, 1)
    return start, add_months(start, 1)


def add_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def month_label(day: date) -> str:
    return day.strftime("%B %Y")


def fmt_date(day: date) -> str:
    return day.isoformat()


def fmt_ts(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day)


def ts_window(start: date, end: date) -> tuple[str, str]:
    """The timestamps of midnight on `start` and on `end` (a half-open window)."""
    return fmt_ts(midnight(start)), fmt_ts(midnight(end))


def parse_ts(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S")


def day_seconds(rng: random.Random, start: date, end: date) -> datetime:
    """A whole-second moment in [start, end)."""
    span = (end - start).days * 86400
    return datetime(start.year, start.month, start.day) + timedelta(seconds=rng.randrange(span))


def mean_days(pairs: list[tuple[datetime, datetime]]) -> Fraction:
    """Exact mean elapsed days of (start, end) pairs (whole seconds / 86400)."""
    if not pairs:
        raise ValueError("mean of no durations")
    seconds = sum(int((end - start).total_seconds()) for start, end in pairs)
    return Fraction(seconds, 86400 * len(pairs))
