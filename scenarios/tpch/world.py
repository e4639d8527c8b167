"""TPC-H at a chosen scale factor, generated offline with DuckDB's `tpch` extension.

Snapshots are scale factors: `sf0.01`, `sf1`, `sf10`, ... (`sf<number>`); `base` means
`sf$BACKINTEL_TPCH_SF` (default `1`), resolved by `TpchWorld.resolve_snapshot` before building
and before looking up references (`scenarios/references/tpch-sf<sf>.json`).

A build writes, under `<data dir>/worlds/tpch-sf<sf>/` and a file lock (like every world):
`parquet/<table>.parquet` (the canonical form: TPC-H's own types, DECIMAL(15,2) money and DATE
dates, rows in primary-key order; `scenarios/tpch/build.py` writes them one `dbgen` part at a
time) and `world.json` last. `tpch.sqlite` (the same tables and order through DuckDB's sqlite
writer: money as REAL, dates as 'YYYY-MM-DD' text, unique indexes on the primary keys) is
written from the Parquet files when something first reads it (`with_sqlite`): `ensure_built`
does, `ensure_parquet` (a run whose store reads only Parquet) does not. The
data hash is a logical one computed by DuckDB (per table: name, column types, row count and the
sum of row hashes), since hashing millions of rows in Python would take minutes at SF1. The
extensions load from their wheels; nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import duckdb
import polars as pl
from filelock import FileLock

from scenarios.references import ReferencedWorld
from scenarios.tpch.build import TABLES, build_tables, connect, write_sqlite
from scenarios.world_base import COMPLETE_MARKER, Oracle, built_content_hash, keep_data_hash
from stores.base import DatasetFiles

__all__ = ["SF_ENV", "TABLES", "TpchWorld", "duckdb_data_hash", "scale_factor"]

SF_ENV = "BACKINTEL_TPCH_SF"
DEFAULT_SF = "1"
_SNAPSHOT = re.compile(r"^sf(\d+(?:\.\d+)?)$")


def scale_factor(snapshot: str) -> str:
    """The scale factor of a snapshot (`sf0.01` -> `0.01`; `base` -> $BACKINTEL_TPCH_SF or 1)."""
    if snapshot == "base":
        raw = os.environ.get(SF_ENV, "").strip() or DEFAULT_SF
        snapshot = f"sf{raw.removeprefix('sf')}"
    match = _SNAPSHOT.match(snapshot)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(
            f"TPC-H snapshot {snapshot!r} is not a scale factor; write sf<number> such as "
            f"sf0.01, sf1 or sf10 (or set {SF_ENV} to a number for `base`)"
        )
    return match.group(1)


def duckdb_data_hash(parquet_dir: Path) -> str:
    """sha256 over each table's name, column names and types, row count and the sum of DuckDB
    row hashes (order-independent; stable for the pinned DuckDB version)."""
    digest = hashlib.sha256()
    conn = duckdb.connect(config={"autoload_known_extensions": "false"})
    try:
        for path in sorted(parquet_dir.glob("*.parquet")):
            src = f"read_parquet('{path.resolve()}')"
            cols = conn.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()
            row = conn.execute(f"SELECT count(*), sum(hash(t)::HUGEINT) FROM {src} t").fetchone()
            digest.update(json.dumps([path.stem, [c[:2] for c in cols], str(row)]).encode())
    finally:
        conn.close()
    return digest.hexdigest()


class TpchWorld(ReferencedWorld):
    """The eight TPC-H tables from `dbgen` at the snapshot's scale factor."""

    name = "tpch"
    primary_keys: ClassVar[Mapping[str, tuple[str, ...]]] = TABLES

    @property
    def config(self) -> dict[str, int]:
        return {"generator": 1}

    def _check_snapshot(self, snapshot: str) -> None:
        scale_factor(snapshot)

    def resolve_snapshot(self, snapshot: str) -> str:
        """`sf<sf>`: `base` becomes `sf$BACKINTEL_TPCH_SF` (default `sf1`), so builds and
        references (`tpch-sf1.json`, `tpch-sf0.01.json`) follow the variable."""
        return f"sf{scale_factor(snapshot)}"

    def build_seconds(self, snapshot: str) -> float:
        """About 30 s per unit of scale factor (SF1: `dbgen` and Parquet; the SQLite file,
        written when something reads it, about 15 s more)."""
        return 30.0 * float(scale_factor(snapshot))

    def build_dir(self, data_dir: Path, snapshot: str = "base") -> Path:
        return data_dir / "worlds" / f"tpch-sf{scale_factor(snapshot)}"

    def generate(self, snapshot: str) -> dict[str, pl.DataFrame]:
        """The tables as polars frames (small scale factors only: everything is in memory)."""
        conn = connect()
        try:
            conn.execute(f"CALL dbgen(sf={scale_factor(snapshot)})")
            return {t: conn.execute(f"SELECT * FROM {t}").pl() for t in TABLES}
        finally:
            conn.close()

    def _files(self, folder: Path) -> DatasetFiles:
        """The built files; `sqlite_path` None until the SQLite file is written
        (`with_sqlite`)."""
        files = super()._files(folder)
        if files.sqlite_path is not None and not files.sqlite_path.is_file():
            files = replace(files, sqlite_path=None)
        return files

    def ensure_built(self, data_dir: Path, snapshot: str = "base") -> DatasetFiles:
        """The Parquet files and `tpch.sqlite` (`ensure_parquet`: the Parquet files alone)."""
        return self.with_sqlite(super().ensure_built(data_dir, snapshot))

    def ensure_parquet(self, data_dir: Path, snapshot: str = "base") -> DatasetFiles:
        """The Parquet files, built if absent; `tpch.sqlite` only if written already."""
        return super().ensure_built(data_dir, snapshot)

    def with_sqlite(self, files: DatasetFiles) -> DatasetFiles:
        """The files with `tpch.sqlite`, written from the Parquet files the first time a store
        or a check reads it (once per machine, under a file lock): a run that reads only the
        Parquet files (`lake-parquet`, DuckDB, ...) never waits for it."""
        if files.sqlite_path is not None:
            return files
        folder = files.parquet_dir.parent
        target = folder / f"{self.name}.sqlite"
        with FileLock(str(target) + ".lock"):
            if not target.is_file():
                for dead in folder.glob(f".{target.name}.tmp-*"):  # a killed writer's
                    dead.unlink()
                for spill in folder.glob("spill-*"):
                    shutil.rmtree(spill)
                tmp = folder / f".{target.name}.tmp-{os.getpid()}"
                try:
                    write_sqlite(files.parquet_dir, tmp, folder / f"spill-{os.getpid()}")
                    tmp.rename(target)
                except BaseException:
                    tmp.unlink(missing_ok=True)
                    raise
        return replace(files, sqlite_path=target)

    def _build_into(self, folder: Path, snapshot: str) -> None:
        sf = scale_factor(snapshot)
        parquet = folder / "parquet"
        parquet.mkdir()
        counts = build_tables(sf, parquet, folder / "spill")
        digest = duckdb_data_hash(parquet)
        keep_data_hash(parquet, digest, self.fingerprint_method)
        manifest = {
            "world": self.name,
            "snapshot": f"sf{sf}",
            "scale_factor": sf,
            "config": self.config,
            "duckdb": duckdb.__version__,
            "data_hash": digest,
            "tables": counts,
        }
        (folder / COMPLETE_MARKER).write_text(json.dumps(manifest, indent=2, sort_keys=True))

    fingerprint_method = "duckdb-parquet-v1"

    def data_hash(self, files: DatasetFiles) -> str:
        """`duckdb_data_hash`, kept per state of a built world's files (`built_content_hash`)."""
        return built_content_hash(files.parquet_dir, duckdb_data_hash, self.fingerprint_method)

    @property
    def oracles(self) -> Mapping[str, Oracle]:
        from scenarios.tpch.oracles import ORACLES

        return ORACLES
