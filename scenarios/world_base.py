"""Datasets scenarios are asked over ("worlds"): a registry, and building them to disk once.

A world generates its tables, writes them as canonical Parquet (one `<table>.parquet` per
table) and builds a SQLite database from that Parquet, under
`<data dir>/worlds/<name>-<config hash>/`. The build runs once per machine: a file lock makes
concurrent xdist workers wait for one builder, and the builder writes into a temporary folder
renamed into place only when complete, so a half-built folder is never used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from filelock import FileLock

from pytest_backintel.records.writer import read_json, write_json
from pytest_backintel.scenario import Scenario
from stores.base import DatasetFiles

if TYPE_CHECKING:  # polars is imported where data is built or hashed, not to look a world up
    import polars as pl

__all__ = [
    "DATA_DIR_ENV",
    "Oracle",
    "UnknownWorldError",
    "World",
    "available_worlds",
    "content_hash",
    "data_dir",
    "get_world",
]

DATA_DIR_ENV = "BACKINTEL_DATA_DIR"
REPO_ROOT = Path(__file__).resolve().parent.parent
COMPLETE_MARKER = "world.json"
"""Written last inside the build folder; its presence means the build is complete."""

Oracle = Callable[[Path], dict[str, Any]]
"""An oracle: canonical Parquet folder -> metric name -> value (tables: list of row dicts)."""


class UnknownWorldError(LookupError):
    """No world of that name; the message lists the registered ones."""


def data_dir() -> Path:
    """Where generated data lives: $BACKINTEL_DATA_DIR, else `<repo root>/data`."""
    raw = os.environ.get(DATA_DIR_ENV, "").strip()
    return Path(raw).expanduser().resolve() if raw else REPO_ROOT / "data"


def _sqlite_type(dtype: pl.DataType) -> str:
    import polars as pl

    for polars_type, sql_type in {
        pl.String: "TEXT",
        pl.Int64: "INTEGER",
        pl.Float64: "REAL",
    }.items():
        if dtype == polars_type:
            return sql_type
    raise TypeError(f"no SQLite type for polars dtype {dtype}; allowed: String, Int64, Float64")


def content_hash(parquet_dir: Path) -> str:
    """sha256 over the tables' logical content: names, column names and types, and rows in a
    canonical (sorted) order. Independent of Parquet encoding, row order and file bytes."""
    import polars as pl

    h = hashlib.sha256()
    files = sorted(parquet_dir.glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"no <table>.parquet files in {parquet_dir}")
    for path in files:
        df = pl.read_parquet(path)
        h.update(f"table {path.stem}\n".encode())
        h.update(json.dumps([[c, str(t)] for c, t in df.schema.items()]).encode() + b"\n")
        if df.height:
            df = df.sort(df.columns, nulls_last=True, maintain_order=True)
        for row in df.iter_rows():
            h.update(json.dumps(row, ensure_ascii=False).encode() + b"\n")
    return h.hexdigest()


DATA_HASH_FILE = "data_hash.json"
"""Beside a built world's manifest: its content hash and the state of the files it covers."""


def _files_state(parquet_dir: Path) -> list[list[object]]:
    return [
        [p.name, st.st_size, st.st_mtime_ns, st.st_ino]
        for p in sorted(parquet_dir.glob("*.parquet"))
        for st in [p.stat()]
    ]


def built_content_hash(
    parquet_dir: Path, compute: Callable[[Path], str] | None = None, method: str | None = None
) -> str:
    """`compute(parquet_dir)` (`content_hash`, or the world's `method`) of a world folder this
    harness built (it holds `COMPLETE_MARKER`), computed once per state of its files and kept
    in `DATA_HASH_FILE`: reading and sorting every row costs ~0.8 s per process for the Olist
    world, reading TPC-H's 2 s. Any other folder (a source of the user's own) is hashed every
    time and nothing is written into it."""
    folder = parquet_dir.parent
    compute = compute or content_hash
    if not (folder / COMPLETE_MARKER).is_file():
        return compute(parquet_dir)
    state = _files_state(parquet_dir)
    kept = read_json(folder / DATA_HASH_FILE)
    fresh = kept.get("files") == state and kept.get("method") == method
    if fresh and isinstance(kept.get("data_hash"), str):
        return str(kept["data_hash"])
    digest = compute(parquet_dir)
    keep_data_hash(parquet_dir, digest, method)
    return digest


def keep_data_hash(parquet_dir: Path, digest: str, method: str | None = None) -> None:
    """Keep `digest` in `DATA_HASH_FILE` as the hash of `parquet_dir`'s files as they are now
    (by `method`, when not `content_hash`): a build writes the one its manifest holds, so the
    run that built the world does not compute it again."""
    kept: dict[str, object] = {"data_hash": digest, "files": _files_state(parquet_dir)}
    if method is not None:
        kept["method"] = method
    with contextlib.suppress(OSError):  # a read-only data folder: the next process hashes again
        write_json(parquet_dir.parent / DATA_HASH_FILE, kept)


class World(ABC):
    """A registered dataset: its config, generator, SQLite keys and oracles."""

    name: ClassVar[str]
    snapshots: ClassVar[tuple[str, ...]] = ("base",)
    primary_keys: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    """Table -> primary-key columns in the SQLite build (tables not listed get none)."""
    foreign_keys: ClassVar[Mapping[str, tuple[tuple[str, str, str], ...]]] = {}
    """Table -> (column, referenced table, referenced column), declared in the SQLite build."""

    @property
    @abstractmethod
    def config(self) -> dict[str, int]:
        """Everything that determines the data (recorded with references)."""

    @abstractmethod
    def generate(self, snapshot: str) -> dict[str, pl.DataFrame]:
        """The tables of one snapshot, deterministically from `config`."""

    @property
    @abstractmethod
    def oracles(self) -> Mapping[str, Oracle]:
        """Oracle name -> function, for the world's answerable scenarios."""

    def code_fingerprint(self) -> str:
        """A hash of the generator's source, so a changed generator never reuses an old build
        (override; empty means the config alone identifies the data)."""
        return ""

    @property
    def config_hash(self) -> str:
        """Names the build folder: the config plus the generator's code fingerprint."""
        blob = json.dumps(
            {"world": self.name, "code": self.code_fingerprint(), **self.config}, sort_keys=True
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def verify(self, data_dir: Path, snapshot: str = "base") -> list[str]:
        """What differs from the committed fingerprints of a snapshot's files (empty: all
        unchanged). The harness calls it before and after every item of worlds that pin
        their files; a generated world rebuilds on change instead, so it has nothing to pin."""
        return []

    def resolve_snapshot(self, snapshot: str) -> str:
        """The concrete snapshot a binding stands for: the name builds and references are keyed
        by. Identity here; a world whose `base` depends on the environment (TPC-H's scale
        factor) returns the snapshot it means."""
        return snapshot

    def build_dir(self, data_dir: Path, snapshot: str = "base") -> Path:
        root = data_dir / "worlds" / f"{self.name}-{self.config_hash}"
        return root if snapshot == "base" else root / "snapshots" / snapshot

    def build_cost(self, data_dir: Path, snapshot: str = "base") -> float:
        """About how many seconds `ensure_built` would take here: 0 when the snapshot is
        built (the harness builds the longest ahead first)."""
        snapshot = self.resolve_snapshot(snapshot)
        built = (self.build_dir(data_dir, snapshot) / COMPLETE_MARKER).is_file()
        return 0.0 if built else self.build_seconds(snapshot)

    def build_seconds(self, snapshot: str) -> float:
        """About how long a build of `snapshot` takes on a 2-core machine (override)."""
        return 5.0

    def _check_snapshot(self, snapshot: str) -> None:
        if snapshot not in self.snapshots:
            raise ValueError(
                f"world {self.name!r} has no snapshot {snapshot!r}; "
                f"available: {', '.join(self.snapshots)}"
            )

    def _files(self, folder: Path) -> DatasetFiles:
        return DatasetFiles(
            name=self.name,
            parquet_dir=folder / "parquet",
            sqlite_path=folder / f"{self.name}.sqlite",
            extra={"manifest": folder / COMPLETE_MARKER},
        )

    def ensure_parquet(self, data_dir: Path, snapshot: str = "base") -> DatasetFiles:
        """`ensure_built` for a caller that reads only the Parquet files: a world that writes
        its SQLite file on demand (TPC-H) leaves it unwritten (`sqlite_path` None) until
        `with_sqlite`."""
        return self.ensure_built(data_dir, snapshot)

    def with_sqlite(self, files: DatasetFiles) -> DatasetFiles:
        """The built files with their SQLite file, written now by a world that writes it on
        demand; a world that writes it with the build has it already."""
        return files

    def ensure_built(self, data_dir: Path, snapshot: str = "base") -> DatasetFiles:
        """The snapshot's Parquet and SQLite files, building them first if absent.

        Safe under concurrency: one process builds under a file lock, the others wait and
        reuse its result."""
        snapshot = self.resolve_snapshot(snapshot)
        self._check_snapshot(snapshot)
        final = self.build_dir(data_dir, snapshot)
        if (final / COMPLETE_MARKER).is_file():
            return self._files(final)
        final.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(final) + ".lock"):
            if (final / COMPLETE_MARKER).is_file():
                return self._files(final)
            if final.exists():  # left behind by an interrupted, non-atomic removal
                shutil.rmtree(final)
            tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
            tmp.chmod(0o755)
            try:
                self._build_into(tmp, snapshot)
                tmp.rename(final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        return self._files(final)

    def _build_into(self, folder: Path, snapshot: str) -> None:
        tables = self.generate(snapshot)
        parquet_dir = folder / "parquet"
        parquet_dir.mkdir()
        for table, df in sorted(tables.items()):
            df.write_parquet(parquet_dir / f"{table}.parquet", statistics=False)
        self._build_sqlite(parquet_dir, folder / f"{self.name}.sqlite")
        digest = content_hash(parquet_dir)
        manifest = {
            "world": self.name,
            "snapshot": snapshot,
            "config": self.config,
            "data_hash": digest,
            "tables": {t: df.height for t, df in sorted(tables.items())},
        }
        keep_data_hash(parquet_dir, digest)
        (folder / COMPLETE_MARKER).write_text(json.dumps(manifest, indent=2, sort_keys=True))

    def _build_sqlite(self, parquet_dir: Path, target: Path) -> None:
        """A SQLite database loaded from the canonical Parquet, with types and keys."""
        import polars as pl

        con = sqlite3.connect(target)
        try:
            for path in sorted(parquet_dir.glob("*.parquet")):
                df = pl.read_parquet(path)
                table = path.stem
                pk = self.primary_keys.get(table, ())
                cols = [
                    f'"{c}" {_sqlite_type(t)}{" NOT NULL" if c in pk else ""}'
                    for c, t in df.schema.items()
                ]
                if pk:
                    cols.append(f"PRIMARY KEY ({', '.join(pk)})")
                for col, ref_table, ref_col in self.foreign_keys.get(table, ()):
                    cols.append(f"FOREIGN KEY ({col}) REFERENCES {ref_table} ({ref_col})")
                con.execute(f'CREATE TABLE "{table}" (\n  ' + ",\n  ".join(cols) + "\n)")
                marks = ", ".join("?" for _ in df.columns)
                con.executemany(f'INSERT INTO "{table}" VALUES ({marks})', df.iter_rows())
            con.commit()
            con.execute("VACUUM")
        finally:
            con.close()

    fingerprint_method = "parquet-polars-sorted-rows-v1"
    """The name and version of `data_hash`'s method, recorded with every trial."""

    def data_hash(self, files: DatasetFiles) -> str:
        """sha256 of the canonical Parquet content (`content_hash`, kept per file state for
        a built world: `built_content_hash`)."""
        return built_content_hash(files.parquet_dir)

    @abstractmethod
    def reference(
        self, scenario: Scenario, files: DatasetFiles, data_hash: str
    ) -> Mapping[str, Any]:
        """The evaluator's reference values of `scenario` on `files` (see
        `scenarios.references.ReferencedWorld`)."""


def available_worlds() -> list[str]:
    from pytest_backintel.collect.worlds import available_worlds as registered

    return registered()


def get_world(name: str) -> World:
    """The world registered as `name` in the `backintel.worlds` entry points (config from the
    environment), or a closest-match error."""
    from pytest_backintel.collect.worlds import UnknownWorldError as _Unknown
    from pytest_backintel.collect.worlds import get_world as registered

    try:
        world = registered(name)
    except _Unknown as exc:
        raise UnknownWorldError(str(exc)) from exc
    if not isinstance(world, World):
        raise UnknownWorldError(f"world {name!r} is not a scenarios.worlds.World: {world!r}")
    return world
