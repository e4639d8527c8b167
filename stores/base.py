"""One interface for every data store the analyst can be given.

A backend (`Store`) is set up once per session, provisions an isolated copy of a dataset per
item under an opaque id (`ProvisionedStore`), and hands out read-only analyst connections
(`StoreSession`). Nothing here knows about scenarios, analysts or scoring.
"""

from __future__ import annotations

import importlib
import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar

from stores.capabilities import StoreCapabilities, UnsupportedCapability

__all__ = [
    "MAX_CELL_BYTES",
    "MAX_RESULT_BYTES",
    "MAX_ROWS",
    "Attachment",
    "Column",
    "DatasetFiles",
    "Fingerprint",
    "Plans",
    "ProvisionedStore",
    "QueryError",
    "QueryRefused",
    "QueryResult",
    "QueryTimeout",
    "RowCounts",
    "Store",
    "StoreError",
    "StoreSession",
    "SweepIncomplete",
    "TableInfo",
    "ViewProbeKind",
    "load_object",
    "new_store_id",
]

MAX_ROWS = 200
"""The most rows `run_sql` returns to the analyst; the result says when it cut."""
MAX_CELL_BYTES = 4_096
"""The most bytes of one text or binary cell a result carries; longer cells are cut."""
MAX_RESULT_BYTES = 4_000_000
"""The most bytes of cells one result carries (`run_sql`'s default, evidence re-execution);
rows past it are dropped and the result says so. The analyst's tool passes a smaller cap."""

Cell = int | float | str | bool | bytes | Decimal | date | datetime | None


class StoreError(Exception):
    """The store itself failed (provisioning, teardown, fingerprinting): not the analyst's fault."""


class SweepIncomplete(StoreError):
    """A sweep of a server (`backintel clean`, a session's start) that could not remove
    everything a gone run made: `dropped` what it did, `left` one line per server naming what
    is still there and how to finish (the record of it is kept)."""

    def __init__(self, dropped: list[str], left: list[str]) -> None:
        super().__init__("; ".join(left))
        self.dropped = dropped
        self.left = left


class QueryError(Exception):
    """A query the analyst sent could not run; the message is written for the analyst to read."""


class QueryRefused(QueryError):
    """A write, DDL, ATTACH, extension load or state-changing setting was refused."""


class QueryTimeout(QueryError):
    """A statement ran past the per-statement time limit."""


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    nullable: bool = True


RowCounts = Callable[[str, Callable[[], int]], int]
"""A table's row count for `describe_table`: one kept for the same content, or computed by
the callable given (a count reads the whole table, seconds per GB)."""


@dataclass(frozen=True)
class TableInfo:
    name: str
    columns: list[Column]
    row_count: int


@dataclass(frozen=True)
class QueryResult:
    """Rows of a read-only query: at most `max_rows` of them and `max_bytes` of cells, each
    text or binary cell at most `max_cell_bytes` long (see `stores.common.caps`)."""

    columns: list[str]
    rows: list[tuple[Cell, ...]]
    truncated: bool = False
    """True when the query produced more rows than were returned (for either cap)."""
    max_rows: int = MAX_ROWS
    cut_cells: int = 0
    """How many cells were cut to `max_cell_bytes`."""
    max_cell_bytes: int = MAX_CELL_BYTES
    cut_by_bytes: bool = False
    """True when rows were dropped because the result reached `max_bytes`."""
    max_bytes: int = MAX_RESULT_BYTES

    @property
    def limit_note(self) -> str | None:
        """What the caps removed, in words, or None when the result is complete."""
        notes = []
        if self.cut_by_bytes:
            notes.append(
                f"only the first {len(self.rows)} rows are shown: the result reached the "
                f"{self.max_bytes}-byte cap"
            )
        elif self.truncated:
            notes.append(f"only the first {self.max_rows} rows are shown")
        if self.cut_cells:
            notes.append(
                f"{self.cut_cells} cell(s) longer than {self.max_cell_bytes} bytes were cut"
            )
        return "; ".join(notes) or None

    def records(self) -> list[dict[str, Cell]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]

    def to_text(self) -> str:
        """A compact tab-separated rendering for a model to read, stating any truncation."""
        lines = ["\t".join(self.columns)]
        lines += ["\t".join("NULL" if v is None else str(v) for v in row) for row in self.rows]
        note = self.limit_note
        if note is not None:
            lines.append(f"[truncated: {note}; aggregate in SQL instead of reading rows]")
        else:
            lines.append(f"[{len(self.rows)} row(s)]")
        return "\n".join(lines)


@dataclass(frozen=True)
class Fingerprint:
    """Logical content hash (tables, schemas, rows in a canonical order) and physical file hash."""

    logical: str
    physical: str


@dataclass(frozen=True)
class DatasetFiles:
    """A dataset as files on disk, the source every backend provisions from."""

    name: str
    parquet_dir: Path
    """One `<table>.parquet` file per table: the canonical form."""
    sqlite_path: Path | None = None
    """A prebuilt SQLite database with the same tables, when one exists."""
    extra: dict[str, Path] = field(default_factory=dict)
    denied: tuple[str, ...] = ()
    """Tables the analyst's role may not read (a missing grant): a backend that can deny
    (`Store.denies_grants`) refuses every read of them; the others cannot provision it."""

    @property
    def tables(self) -> list[str]:
        return sorted(p.stem for p in self.parquet_dir.glob("*.parquet"))


class StoreSession(ABC):
    """A read-only analyst connection to one provisioned store."""

    @abstractmethod
    def list_tables(self) -> list[str]: ...

    @abstractmethod
    def describe_table(self, name: str) -> TableInfo:
        """Columns, types and row count; `QueryError` for an unknown table."""

    @abstractmethod
    def run_sql(
        self, sql: str, max_rows: int = MAX_ROWS, max_bytes: int = MAX_RESULT_BYTES
    ) -> QueryResult:
        """Run one read-only statement; `QueryRefused`, `QueryTimeout` or `QueryError`.
        The caps hold inside the engine's fetch (`stores.common.caps`), before anything is
        materialised here."""

    @abstractmethod
    def close(self) -> None: ...

    def tables_read(self, sql: str) -> set[str] | None:
        """The tables (or files) the engine's plan for `sql` reads, planned but not run; an
        empty set when it reads none (a literal `SELECT`). None: this backend cannot tell.

        Only called for statements `run_sql` has already accepted. Raises `QueryError`."""
        return None

    def set_time_limit(self, seconds: float) -> float | None:
        """Let each statement run up to `seconds`; the limit now in force, or None where this
        backend's limit is fixed (its store's `statement_timeout_s`)."""
        return None

    def __enter__(self) -> StoreSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Attachment:
    """How a DuckDB session attaches a provisioned item read-only (the `multi` store): the
    ATTACH target and type, its schema, the folders and single files it may read, and the
    extensions it needs."""

    target: str
    kind: str
    schema: str
    allowed: tuple[Path, ...] = ()
    extensions: tuple[str, ...] = ()
    files: tuple[Path, ...] = ()


class ProvisionedStore(ABC):
    """One item's isolated store: an opaque id, fresh read-only connections, fingerprints."""

    backend: str
    store_id: str

    @property
    def display_id(self) -> str:
        """`<backend>:<opaque id>`, the only name the analyst and reports see."""
        return f"{self.backend}:{self.store_id}"

    @abstractmethod
    def connect(self) -> StoreSession:
        """A fresh read-only connection (each tool session and each evidence re-run gets one)."""

    @abstractmethod
    def fingerprint(self) -> Fingerprint: ...

    @property
    def mount_path(self) -> Path | None:
        """A file or folder a sandbox may mount read-only, when the store lives on disk."""
        return None

    def attachment(self) -> Attachment | None:
        """How DuckDB attaches this item (None: it cannot be a `multi` store's component)."""
        return None

    def columns_read(self, sql: str) -> dict[str, set[str]] | None:
        """Table -> the columns `sql` reads, planned but never run (None: this backend cannot
        tell); only called for statements `run_sql` accepted."""
        return None

    @abstractmethod
    def teardown(self) -> None:
        """Remove the copy; safe to call twice and after an interrupted item."""


Plans = tuple[dict[str, Any], list[str]]
"""A source's probe plan: each table's `stores.probe.TablePlan`, and notes on the tables kept
whole."""


@dataclass(frozen=True)
class ViewProbeKind:
    """A source whose data probe is views over it, not a copy: how it is planned (once per
    source) and how one salt's probe is made from the plan (`Store.view_probe_kind`)."""

    plan: Callable[[Store, DatasetFiles], Plans]
    probe: Callable[
        [Store, DatasetFiles, Path, int, str | None, dict[str, Any], list[str]],
        ProvisionedStore,
    ]


def load_object(path: str) -> Any:
    """The object at `module:attribute`, imported on first use (a backend's heavy or rarely
    needed parts, such as its probe views, stay unimported until asked for)."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


class Store(ABC):
    """A backend: set up once per session, provisions isolated stores per item."""

    name: ClassVar[str]
    capabilities: ClassVar[StoreCapabilities] = StoreCapabilities()
    """What this store can do, declared in one place (`stores.capabilities`)."""
    dialect: ClassVar[str] = "sqlite"
    """The SQL dialect the analyst writes here: `capabilities.dialect` (kept in step)."""
    statement_timeout_s: float = 10.0
    denies_grants: ClassVar[bool] = False
    """Whether `provision` honours `DatasetFiles.denied`: `capabilities.denies_grants`."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """`dialect` and `denies_grants` follow `capabilities`; a store written before
        capabilities existed (only `dialect` or `denies_grants` set) gets them declared."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__
        if "capabilities" in own:
            cls.dialect = cls.capabilities.dialect
            cls.denies_grants = cls.capabilities.denies_grants
        elif "dialect" in own or "denies_grants" in own:
            cls.capabilities = replace(
                cls.capabilities, dialect=cls.dialect, denies_grants=cls.denies_grants
            )

    def __init__(self, workdir: Path, *, statement_timeout_s: float | None = None) -> None:
        self.workdir = workdir
        if statement_timeout_s is not None:
            self.statement_timeout_s = statement_timeout_s

    def setup_session(self) -> None:
        """Once per test session (per xdist worker): start servers, create folders. The
        workdir records this process as its owner (`stores.owner`), so a crashed run's
        copies are found and removed by the next session (`pytest_backintel.run.cleanup`)."""
        from stores.owner import mark_folder

        mark_folder(self.workdir)

    @abstractmethod
    def provision(self, dataset: DatasetFiles) -> ProvisionedStore:
        """An isolated copy of `dataset` under a fresh opaque id."""

    @classmethod
    def for_source(
        cls,
        workdir: Path,
        location: str,
        *,
        role: str | None = None,
        cache_dir: Path | None = None,
        dsn_env: str | None = None,
    ) -> Store:
        """This store serving a user's own source at `location` (a path or DSN) where it is
        (`capabilities.in_place`); `cache_dir` keeps hashes for every process of the source;
        `dsn_env` names the environment variable a DSN came from (`backintel clean` reads it
        again rather than keep a password)."""
        raise UnsupportedCapability(
            f"store {cls.name!r} does not support in_place=True: it copies each item's data"
        )

    @classmethod
    def check_location(cls, location: str) -> None:
        """Raise `StoreError` naming what is wrong with a source's `location`, at collection."""

    @classmethod
    def fingerprint_file(cls, path: Path) -> Fingerprint:
        """The fingerprint this store gives an item made from the data file at `path` (what
        a manifest records so a run can check the file it was given)."""
        raise UnsupportedCapability(f"store {cls.name!r} fingerprints no single data file")

    def source_fingerprint(self) -> Fingerprint:
        """The fingerprint of the source used in place, read where it is (no item made)."""
        raise UnsupportedCapability(f"store {self.name!r} does not support in_place=True")

    def older_fingerprint(self, dataset: DatasetFiles, method: str) -> str | None:
        """The source's data hash by an older fingerprint method (to verify a lock file an
        older release wrote); None for a method this store no longer has."""
        return None

    def view_probe_kind(self, form: str | None) -> ViewProbeKind | None:
        """How this store serves the evidence stage's data probes of a source of `form` as
        views over it (`capabilities.perturbation == "views"`); None: as copies."""
        return None

    def teardown_session(self) -> None:
        """Once per test session: stop what `setup_session` started."""


def new_store_id() -> str:
    """An opaque id that reveals nothing about the case (`bi_` and 12 hex digits)."""
    return f"bi_{secrets.token_hex(6)}"


def normalise_cell(value: Any) -> Cell:
    """Backend values as plain Python: Decimal stays Decimal, memoryview becomes bytes."""
    if isinstance(value, memoryview):
        return bytes(value)
    return value  # type: ignore[no-any-return]
