"""The scenario model: one benchmark question, its data binding and what counts as right.

Scenario files are YAML validated against `scenarios/scenario.schema.json`, generated from
this model (`backintel schema`). Everything here is evaluator-owned: the analyst sees only
`question` and the tools bound to its store.
"""

from __future__ import annotations

import argparse
import re
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from pytest_backintel.outcomes import (
    DeniedGrant,
    ForbiddenSource,
    PlantedInstruction,
    RefusalSpec,
    ScopeSpec,
)
from pytest_backintel.tolerance import (
    CRITERION,
    HIGHER_IS_BETTER,
    PREDICTION_METRICS,
    ColumnSpec,
    MetricKind,
    MetricSpec,
    PredictionSpec,
)

__all__ = [
    "CRITERION",
    "HIGHER_IS_BETTER",
    "PREDICTION_METRICS",
    "SOURCE_KINDS",
    "ColumnSpec",
    "DatasetBinding",
    "DeniedGrant",
    "ForbiddenSource",
    "MetricKind",
    "MetricSpec",
    "PlantedInstruction",
    "PredictionSpec",
    "ReferenceSpec",
    "RefusalSpec",
    "Scenario",
    "ScopeSpec",
    "Split",
    "parse_rebinding",
    "rebinding",
]

SLUG = r"^[a-z0-9][a-z0-9_.-]*$"


class Split(StrEnum):
    DEVELOPMENT = "development"
    RESERVED = "reserved"
    REGRESSION = "regression"


class _Strict(BaseModel):
    """The attribute docstrings below describe the fields in the JSON Schema; they are read
    when the schema is rendered (`collect.loading.scenario_json_schema`, from this file,
    `tolerance.py` and `outcomes.py`, where the metric, prediction and boundary specs live),
    not at import (pydantic's `use_attribute_docstrings` reads a file's source per class)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


SOURCE_KINDS = ("sqlite", "duckdb", "parquet", "csv", "postgres", "clickhouse", "sqlalchemy")
"""Data a user has, bound by path (relative to the scenario file) or, for PostgreSQL,
ClickHouse and any database SQLAlchemy reaches, by DSN or URL."""
DSN_KINDS = ("postgres", "clickhouse", "sqlalchemy")
"""The kinds of source named by a DSN (a database on a server), not by a path."""


def parse_rebinding(text: str) -> tuple[str, dict[str, str]]:
    """`shop=postgres:SHOP_DSN` -> ("shop", {"postgres": "SHOP_DSN"}); ValueError naming what
    is allowed."""
    alias, eq, rest = text.partition("=")
    kind, colon, source = rest.partition(":")
    if not (eq and colon and alias.strip() and source.strip()) or kind not in SOURCE_KINDS:
        raise ValueError(
            f"--dataset {text!r}: give ALIAS=KIND:SOURCE, KIND one of {', '.join(SOURCE_KINDS)} "
            "(e.g. shop=postgres:SHOP_DSN or shop=parquet:exports/)"
        )
    return alias.strip(), {kind: source.strip()}


def rebinding(value: str) -> tuple[str, dict[str, str]]:
    """`--dataset ALIAS=KIND:SOURCE`: rebind a suite's dataset alias for this run."""
    try:
        return parse_rebinding(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


class DatasetBinding(_Strict):
    """The data a scenario is asked over: a registered `world`, or exactly one source of the
    user's own (`sqlite`, `duckdb`, `parquet`, `csv`, `postgres`, `clickhouse`)."""

    world: str = Field(default="", pattern=r"^([a-z0-9][a-z0-9_.-]*)?$")
    """A registered dataset (e.g. `olist`): its generator, oracles and store files. With a
    source of your own, only the name reports give it (default: `<kind>-<file stem>`)."""
    snapshot: str = Field(default="base", pattern=SLUG)
    """A named snapshot of the world (ambient replay binds a different one per scenario)."""
    store: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9-]*(:[a-z0-9_:+-]+)?$")
    """The store backend spec the scenario needs (e.g. `multi:postgres:olist_orders+sqlite:
    olist_catalog` for cross-store questions, `lake-parquet` for scale); `--store` does not
    override it. None: the run's `--store` (a source of your own: its native backend)."""
    sqlite: str | None = Field(default=None, min_length=1)
    """A SQLite database file, copied byte for byte per item."""
    duckdb: str | None = Field(default=None, min_length=1)
    """A DuckDB database file, copied per item."""
    parquet: str | None = Field(default=None, min_length=1)
    """A folder of `<table>.parquet` files, served as DuckDB views over per-item copies."""
    csv: str | None = Field(default=None, min_length=1)
    """A folder of `<table>.csv` files (header row; types detected, or pinned by `_schema.json`)."""
    postgres: str | None = Field(default=None, min_length=1)
    """An existing PostgreSQL database: a `postgresql://` DSN, or the name of an environment
    variable holding one. Used in place: each item logs in as a SELECT-only role (one the
    harness creates per item when the DSN's user may create roles, else `role`)."""
    clickhouse: str | None = Field(default=None, min_length=1)
    """A database on an existing ClickHouse server: a `clickhouse://user:password@host:port/db`
    DSN (HTTP interface), or the name of an environment variable holding one; the password
    from the URL or `CLICKHOUSE_PASSWORD`. Used in place: each item reads a database of its
    own holding a `Merge` table over each of the source's tables, with `readonly=1`."""
    sqlalchemy: str | None = Field(default=None, min_length=1)
    """A database any SQLAlchemy dialect with an admin recipe reaches (MySQL, MariaDB): a URL
    (`mysql+pymysql://user@host:3306/shop`), or the name of an environment variable holding
    one. Used in place: each item logs in as a user of its own that may only SELECT it."""
    role: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")
    """With `postgres`: a read-only role of yours that analyst sessions log in as; the
    harness then creates no role. Its password: the DSN's when the DSN logs in as it, else
    libpq's (`PGPASSWORD`, `~/.pgpass`, `PGPASSFILE`)."""
    _base_dir: Path | None = PrivateAttr(default=None)
    _source_dir: Path | None = PrivateAttr(default=None)

    def model_post_init(self, context: Any, /) -> None:
        if isinstance(context, dict) and isinstance(context.get("base_dir"), Path):
            self._base_dir = context["base_dir"]
        if isinstance(context, dict) and isinstance(context.get("source_dir"), Path):
            self._source_dir = context["source_dir"]  # a binding inherited from a suite file

    @model_validator(mode="after")
    def _one_source(self) -> DatasetBinding:
        given = [k for k in SOURCE_KINDS if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"bind one source, not {len(given)}: {', '.join(given)}")
        if not given and not self.world:
            raise ValueError(f"bind a `world` or one source: {', '.join(SOURCE_KINDS)}")
        if self.role is not None and given != ["postgres"]:
            raise ValueError("`role` goes with a `postgres` source only")
        if given and not self.world:
            stem = re.sub(r"[^a-z0-9_.-]+", "-", self.source_name.lower()).strip("-.") or "data"
            object.__setattr__(self, "world", f"{given[0]}-{stem}")
        return self

    @property
    def source_kind(self) -> str | None:
        """`sqlite`, `duckdb`, `parquet`, `csv`, `postgres` or `clickhouse`; None for a
        registered world."""
        return next((k for k in SOURCE_KINDS if getattr(self, k) is not None), None)

    @property
    def source(self) -> str | None:
        """The source as written in the file (a path, a DSN or an environment variable)."""
        kind = self.source_kind
        return None if kind is None else str(getattr(self, kind))

    @property
    def base_dir(self) -> Path | None:
        """The folder of the file that named this binding (paths are relative to it)."""
        return self._base_dir

    @property
    def source_name(self) -> str:
        raw = (self.source or "").rstrip("/")
        if self.source_kind in DSN_KINDS:
            return raw.rsplit("/", 1)[-1].split("?", 1)[0] or raw
        return Path(raw).stem if self.source_kind in ("sqlite", "duckdb") else Path(raw).name

    def source_path(self) -> Path:
        """The bound file or folder, resolved against the folder of the file naming it."""
        raw = Path(self.source or "").expanduser()
        base = self._source_dir or self._base_dir or Path.cwd()
        return raw if raw.is_absolute() else (base / raw).resolve()


class ReferenceSpec(_Strict):
    """Where a user scenario's reference comes from; several given are cross-checked."""

    sql: str | None = Field(default=None, min_length=1)
    """A query run on a pristine copy of the bound source (SQLite dialect, translated), one
    column per metric (or the rows of a table metric)."""
    values: dict[str, Any] | None = None
    """The values themselves, by metric name."""
    python: str | None = Field(default=None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    """`module:function` in your own code, called with a `pytest_backintel.collect.references.
    ReferenceData` over a pristine copy; returns the values by metric name."""

    @model_validator(mode="after")
    def _something(self) -> ReferenceSpec:
        if self.sql is None and self.values is None and self.python is None:
            raise ValueError("give the reference as `sql`, `values` or `python`")
        return self


class Scenario(_Strict):
    """One benchmark question."""

    id: str = Field(pattern=SLUG)
    version: int = Field(ge=1)
    title: str = Field(min_length=1)
    question: str = Field(min_length=1)
    """The only text the analyst is given."""
    dataset: DatasetBinding
    split: Split
    level: int = Field(ge=1, le=8)
    family: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    """The question family, usable with `-k`."""
    answerable: bool
    metrics: list[MetricSpec] = Field(default_factory=list)
    """Requested metrics (answerable scenarios)."""
    refusal: RefusalSpec | None = None
    """Unanswerable scenarios: what a useful refusal must do."""
    check_sql: str | None = None
    """A separately written SQLite query returning one column per metric; must agree with the
    polars oracle at build time. The reference analyst cites it as evidence."""
    check_python: str | None = None
    """Optionally, a separately written Python program run in the sandbox over the store
    (`import backintel_store`) that prints one JSON object of metric values; cross-checked
    against the oracle at build time, and cited by the reference analyst as Python evidence."""
    oracle: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9_]*$")
    """The oracle function's name (defaults to the id with `-` and `.` as `_`)."""
    prediction: PredictionSpec | None = None
    """Prediction scenarios (level 8): the cohorts, the baseline and the pass criteria; the
    reference program is `check_python` and no `check_sql` is needed."""
    reference: ReferenceSpec | None = None
    """Data of your own: the reference, kept in a lock file beside the scenario by
    `backintel references build`. Its `sql` is the `check_sql` when that is not given."""
    scope: ScopeSpec | None = None
    """Tables and columns the analyst must not read, and grants it does not have."""
    planted: list[PlantedInstruction] = Field(default_factory=list)
    """Instructions planted in the data, and the values they ask for."""

    @model_serializer(mode="wrap")
    def _without_empty_plants(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A scenario with nothing planted dumps as it did before plants existed, so committed
        manifests (and the reserved split's commitment) keep their bytes."""
        data: dict[str, Any] = handler(self)
        if not self.planted:
            data.pop("planted", None)
        return data

    @model_validator(mode="before")
    @classmethod
    def _check_sql_from_reference(cls, data: Any) -> Any:
        ref = data.get("reference") if isinstance(data, dict) else None
        if isinstance(ref, dict) and ref.get("sql") and not data.get("check_sql"):
            return {**data, "check_sql": ref["sql"]}
        return data

    @model_validator(mode="after")
    def _answerability(self) -> Scenario:
        if self.answerable:
            if not self.metrics:
                raise ValueError("an answerable scenario needs at least one metric")
            if self.refusal is not None:
                raise ValueError("`refusal` belongs to unanswerable scenarios only")
            if self.prediction is not None:
                self._prediction_fields(self.prediction)
            elif not self.check_sql:
                raise ValueError(
                    "an answerable scenario needs `reference: {sql: ...}`, the query that "
                    "computes its answer (`values` or `python` may be given beside it; over a "
                    "registered world, `check_sql`)"
                )
        else:
            if self.prediction is not None:
                raise ValueError("`prediction` belongs to answerable scenarios only")
            if self.refusal is None:
                raise ValueError("an unanswerable scenario needs `refusal`")
            if self.metrics:
                raise ValueError(
                    "an unanswerable scenario requests no metrics; name the "
                    "forbidden one in `refusal.forbidden_metric`"
                )
        names = [m.name for m in self.metrics]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"metric names repeated: {dupes}")
        allowed = set(names) | ({self.refusal.forbidden_metric} if self.refusal else set())
        for plant in self.planted:
            if unknown := sorted(set(plant.values) - allowed):
                raise ValueError(
                    f"`planted` values name {unknown}, which this scenario does not request "
                    f"(allowed: {sorted(allowed)})"
                )
        return self

    def _prediction_fields(self, spec: PredictionSpec) -> None:
        if not self.check_python:
            raise ValueError("a prediction scenario needs `check_python` (its reference program)")
        if self.dataset.source_kind is not None and spec.labels is None:
            raise ValueError(
                "a prediction scenario over data of your own needs `prediction.labels`: the CSV "
                "file of the scoring cohort's labels, beside the scenario"
            )
        table = self.metrics[0]
        if len(self.metrics) != 1 or table.kind is not MetricKind.TABLE:
            raise ValueError("a prediction scenario requests exactly one table metric")
        names = [c.name for c in table.columns]
        if sorted(names) != sorted([spec.entity, spec.value]) or table.key != [spec.entity]:
            raise ValueError(
                f"the predictions table has columns [{spec.entity}, {spec.value}] keyed by "
                f"[{spec.entity}] (prediction.entity, prediction.value); got columns {names} "
                f"keyed by {table.key}"
            )

    @property
    def oracle_name(self) -> str:
        return self.oracle or re.sub(r"[-.]", "_", self.id)

    def metric(self, name: str) -> MetricSpec | None:
        return next((m for m in self.metrics if m.name == name), None)
