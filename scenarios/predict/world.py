"""Prediction cohorts on the Olist world (world `olist-predict`, level 8).

Each task of `scenarios.predict.tasks` is a snapshot of two tables: `<task>_training`, the entities
predicted before `SCORE_FROM` whose labels were known by then, with their labels; and
`<task>_scoring`, the entities predicted in [`SCORE_FROM`, `SCORE_TO`), without them. The
scoring labels are evaluator-owned: they stay out of the store and go into the committed
references (with the evaluator's baseline), read only after the analyst answered, as level 6
keeps the future out of its snapshots.

Building checks every split, naming the scenario it serves: no person (`customer_unique_id`)
on both sides, every training entity predicted and labelled before the first scoring entity is
predicted, and no scoring label in any table of the store.

The real Olist release: with `BACKINTEL_OLIST_SOURCE=real`, world `olist-predict` is
`OlistPredictRealWorld`, whose cohorts are built the same way from the release loaded by
`backintel data olist --from DIR` (world `olist-real`). It has no committed references: the
hidden labels and the baseline are computed from the release after the analyst has answered
(and the reference program checked on them), never written to the store. A scoring cohort
larger than `MAX_SCORING` entities (the release has thousands per window) is a sample of whole
persons, chosen by a hash of `customer_unique_id`, so the predictions fit in one answer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import polars as pl

from pytest_backintel.scenario import Scenario
from scenarios.olist.generator import OlistConfig, generate
from scenarios.olist.world import GENERATOR_MODULES
from scenarios.predict.tasks import SCORE_FROM, SCORE_TO, TASKS, TRAIN_FROM, Task, order_facts
from scenarios.references import ReferencedWorld
from scenarios.world_base import Oracle, World
from scenarios.world_base import data_dir as default_data_dir
from stores.base import DatasetFiles

__all__ = [
    "PREDICT_VERSION",
    "Cohorts",
    "OlistPredictRealWorld",
    "OlistPredictWorld",
    "SplitError",
    "Window",
    "check_no_leak",
    "check_split",
    "scenario_id",
    "split_cohorts",
]

PREDICT_VERSION = 1
"""Bump when the cohorts change for the same base config."""
MAX_SCORING = 600
"""At most this many scoring entities (the generated world's cohorts are smaller)."""
HERE = Path(__file__).resolve().parent


class SplitError(ValueError):
    """A prediction split that breaks an entity boundary, time order or label secrecy."""


def scenario_id(task: Task) -> str:
    """The scenario a task serves (`l8-<task with dashes>`)."""
    return "l8-" + task.name.replace("_", "-")


@dataclass(frozen=True)
class Window:
    """When training and scoring entities are predicted (half-open intervals)."""

    train_from: datetime = TRAIN_FROM
    score_from: datetime = SCORE_FROM
    score_to: datetime = SCORE_TO
    train_to: datetime | None = None
    """Training entities are predicted and labelled before this (default: `score_from`)."""


@dataclass(frozen=True)
class Cohorts:
    training: pl.DataFrame
    """entity, group, at, label_at, features, label."""
    scoring: pl.DataFrame
    """The same columns: the label is the evaluator's, never written to the store."""


def _instant(value: object) -> datetime:
    if not isinstance(value, datetime):
        raise SplitError(f"a cohort's `at` and `label_at` are datetimes, got {value!r}")
    return value


def check_split(scenario: str, training: pl.DataFrame, scoring: pl.DataFrame) -> None:
    """Entity boundaries and time order (columns entity, group, at, label_at); a `SplitError`
    naming `scenario` otherwise."""
    if training.is_empty() or scoring.is_empty():
        raise SplitError(
            f"scenario {scenario!r}: empty cohort (training {training.height} rows, scoring "
            f"{scoring.height} rows)"
        )
    both = sorted(set(training["group"].to_list()) & set(scoring["group"].to_list()))
    if both:
        raise SplitError(
            f"scenario {scenario!r}: {len(both)} entity group(s) are on both sides of the split "
            f"(e.g. customer_unique_id {both[0]!r}); each person's entities must all be in one "
            "cohort"
        )
    shared = sorted(set(training["entity"].to_list()) & set(scoring["entity"].to_list()))
    if shared:
        raise SplitError(f"scenario {scenario!r}: entity {shared[0]!r} is in both cohorts")
    last = max(_instant(training["at"].max()), _instant(training["label_at"].max()))
    first = _instant(scoring["at"].min())
    if not last < first:
        raise SplitError(
            f"scenario {scenario!r}: time order broken: the training cohort reaches {last} "
            f"(prediction or label) but the scoring cohort starts at {first}; training must "
            "end before scoring begins"
        )


def _capped(scoring: pl.DataFrame, cap: int = MAX_SCORING) -> pl.DataFrame:
    """At most `cap` entities, whole groups taken in the order of a hash of the group."""
    if scoring.height <= cap:
        return scoring
    sizes = scoring.group_by("group").len().sort("group")
    order = sorted(
        zip(sizes["group"].to_list(), sizes["len"].to_list(), strict=True),
        key=lambda g: hashlib.sha256(str(g[0]).encode()).hexdigest(),
    )
    keep, total = [], 0
    for group, size in order:
        if total + size > cap:
            break
        keep.append(group)
        total += size
    return scoring.filter(pl.col("group").is_in(keep))


def split_cohorts(scenario: str, frame: pl.DataFrame, window: Window | None = None) -> Cohorts:
    """Split a task frame by time, leaving out scoring entities of people already in
    training; checked by `check_split`."""
    w = window or Window()
    train_to = w.train_to or w.score_from
    at, label_at = pl.col("at"), pl.col("label_at")
    training = frame.filter((at >= w.train_from) & (at < train_to) & (label_at < train_to))
    scoring = _capped(
        frame.filter(
            (at >= w.score_from)
            & (at < w.score_to)
            & ~pl.col("group").is_in(training["group"].implode())
        )
    )
    cohorts = Cohorts(training.sort("entity"), scoring.sort("entity"))
    check_split(scenario, cohorts.training, cohorts.scoring)
    return cohorts


def store_tables(task: Task, cohorts: Cohorts) -> dict[str, pl.DataFrame]:
    """The task's two store tables: features and label for training, features for scoring."""
    features = [pl.col("entity").alias("order_id"), *(pl.col(f) for f in task.features)]
    return {
        f"{task.name}_training": cohorts.training.select(*features, pl.col(task.target)),
        f"{task.name}_scoring": cohorts.scoring.select(*features),
    }


def check_no_leak(
    scenario: str, task: Task, scoring: pl.DataFrame, tables: Mapping[str, pl.DataFrame]
) -> None:
    """No scoring label reaches the store: the scoring table has no label column, and no
    table holding the label column holds a scoring entity."""
    if task.target in tables[f"{task.name}_scoring"].columns:
        raise SplitError(
            f"scenario {scenario!r}: the scoring table {task.name}_scoring holds the label "
            f"column {task.target!r}"
        )
    ids = scoring["entity"].implode()
    for name, table in sorted(tables.items()):
        if task.target in table.columns and "order_id" in table.columns:
            leaked = table.filter(pl.col("order_id").is_in(ids))
            if not leaked.is_empty():
                raise SplitError(
                    f"scenario {scenario!r}: table {name} holds the label {task.target!r} of "
                    f"{leaked.height} scoring entities (e.g. {leaked['order_id'][0]!r})"
                )


def baseline_value(task: Task, kind: str, training: pl.DataFrame) -> float:
    """The evaluator's simple baseline from the training labels (prevalence, median, mean)."""
    labels = training[task.target].cast(pl.Float64)
    value = {"prevalence": labels.mean(), "mean": labels.mean(), "median": labels.median()}[kind]
    assert isinstance(value, float)
    return value


class OlistPredictWorld(ReferencedWorld):
    """Training and scoring cohorts of every prediction task, derived from the Olist world
    (default config; the base snapshot's data is untouched)."""

    name = "olist-predict"
    primary_keys: ClassVar[Mapping[str, tuple[str, ...]]] = {
        f"{t.name}_{side}": ("order_id",) for t in TASKS for side in ("training", "scoring")
    }
    foreign_keys: ClassVar[Mapping[str, tuple[tuple[str, str, str], ...]]] = {}
    snapshots: ClassVar[tuple[str, ...]] = tuple(t.name for t in TASKS)
    """One snapshot per task, holding only that task's two tables (a feature of one task can
    be another's label)."""

    def __init__(self, config: OlistConfig | None = None) -> None:
        self.olist_config = config or OlistConfig()

    @property
    def config(self) -> dict[str, int]:
        return {**self.olist_config.as_dict(), "predict": PREDICT_VERSION}

    def code_fingerprint(self) -> str:
        digest = hashlib.sha256()
        for module in GENERATOR_MODULES:
            digest.update((HERE.parent / "olist" / module).read_bytes())
        for module in ("world.py", "tasks.py"):
            digest.update((HERE / module).read_bytes())
        return digest.hexdigest()[:16]

    def base_tables(self) -> dict[str, pl.DataFrame]:
        """The Olist tables the cohorts are derived from (the generated world)."""
        return generate(self.olist_config)

    @cached_property
    def cohorts(self) -> dict[str, Cohorts]:
        """Every task's cohorts (task name -> cohorts), each split checked."""
        facts = order_facts(self.base_tables())
        return {t.name: split_cohorts(scenario_id(t), t.frame(facts)) for t in TASKS}

    def generate(self, snapshot: str) -> dict[str, pl.DataFrame]:
        self._check_snapshot(snapshot)
        task = next(t for t in TASKS if t.name == snapshot)
        tables = store_tables(task, self.cohorts[task.name])
        check_no_leak(scenario_id(task), task, self.cohorts[task.name].scoring, tables)
        return tables

    def task_for(self, training_table: str) -> Task:
        for task in TASKS:
            if f"{task.name}_training" == training_table:
                return task
        raise SplitError(f"world {self.name!r} has no prediction task with {training_table!r}")

    def hidden_cohort(self, training_table: str, baseline: str) -> list[dict[str, Any]]:
        """The scoring cohort's entities, hidden labels and the baseline prediction."""
        task = self.task_for(training_table)
        cohorts = self.cohorts[task.name]
        base = baseline_value(task, baseline, cohorts.training)
        return [
            {"entity": e, "label": float(y), "baseline": base}
            for e, y in cohorts.scoring.select("entity", task.target).iter_rows()
        ]

    @property
    def oracles(self) -> Mapping[str, Oracle]:
        return {}


class OlistPredictRealWorld(OlistPredictWorld):
    """The prediction cohorts of the real Olist release (`release`, world `olist-real`, loaded by
    `backintel data olist --from DIR`), serving `olist-predict` when
    `BACKINTEL_OLIST_SOURCE=real`; its references are computed after the analyst answered."""

    name = "olist-predict-real"

    def __init__(self, release: World) -> None:
        super().__init__()
        self.release = release
        self._data_dir: Path | None = None

    @property
    def config(self) -> dict[str, int]:
        return {**self.release.config, "predict": PREDICT_VERSION}

    def code_fingerprint(self) -> str:
        digest = hashlib.sha256(self.release.code_fingerprint().encode())
        for module in ("world.py", "tasks.py"):
            digest.update((HERE / module).read_bytes())
        return digest.hexdigest()[:16]

    def ensure_built(self, data_dir: Path, snapshot: str = "base") -> DatasetFiles:
        self._data_dir = data_dir  # where the release was loaded
        return super().ensure_built(data_dir, snapshot)

    def reference(
        self, scenario: Scenario, files: DatasetFiles, data_hash: str
    ) -> Mapping[str, Any]:
        """Computed from the release in the data folder `files` were built in."""
        if self._data_dir is None:  # <data>/worlds/<world>/snapshots/<task>/parquet
            self._data_dir = files.parquet_dir.parents[4]
        return super().reference(scenario, files, data_hash)

    def base_tables(self) -> dict[str, pl.DataFrame]:
        files = self.release.ensure_built(self._data_dir or default_data_dir())
        return {p.stem: pl.read_parquet(p) for p in sorted(files.parquet_dir.glob("*.parquet"))}
