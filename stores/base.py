"""One interface for every data store the analyst can be given.

A backend (`Store`) is set up once per session, provisions an isolated copy of a dataset per
item under an opaque id (`ProvisionedStore`), and hands out read-only analyst connections
(`StoreSession`). Nothing here knows about scenarios, analysts or scoring.
"""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar

__all__ = [
    "MAX_CELL_BYTES",
    "MAX_RESULT_BYTES",
    "MAX_ROWS",
    "Column",
    "DatasetFiles",
    "Fingerprint",
    "ProvisionedStore",
    "QueryError",
    "QueryRefused",
    "QueryResult",
    "QueryTimeout",
    "RowCounts",
    "Store",
    "StoreError",
    "StoreSession",
    "TableInfo",
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
    text or binary cell at most `max_cell_bytes` long (see `stores.caps`)."""

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
        The caps hold inside the engine's fetch (`stores.caps`), before anything is
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

    @abstractmethod
    def teardown(self) -> None:
        """Remove the copy; safe to call twice and after an interrupted item."""


class Store(ABC):
    """A backend: set up once per session, provisions isolated stores per item."""

    name: ClassVar[str]
    dialect: ClassVar[str] = "sqlite"
    """The SQL dialect the analyst writes here (`sqlite`, `duckdb` or `postgres`)."""
    statement_timeout_s: float = 10.0
    denies_grants: ClassVar[bool] = False
    """Whether `provision` honours `DatasetFiles.denied` (a read grant withheld per table)."""

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
