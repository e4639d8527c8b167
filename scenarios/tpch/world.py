"""TPC-H at a chosen scale factor, generated offline with DuckDB's `tpch` extension.

Snapshots are scale factors: `sf0.01`, `sf1`, `sf10`, ... (`sf<number>`); `base` means
`sf$BACKINTEL_TPCH_SF` (default `1`), resolved by `TpchWorld.resolve_snapshot` before building
and before looking up references (`scenarios/references/tpch-sf<sf>.json`).

A build writes, under `<data dir>/worlds/tpch-sf<sf>/` and a file lock (like every world):
`parquet/<table>.parquet` (the canonical form: TPC-H's own types, DECIMAL(15,2) money and DATE
dates, rows in primary-key order), `tpch.sqlite` (the same tables and order through DuckDB's
sqlite writer: money as REAL, dates as 'YYYY-MM-DD' text, unique indexes on the primary keys)
and `world.json` last; `scenarios/tpch/build.py` writes both, one `dbgen` part at a time. The
data hash is a logical one computed by DuckDB (per table: name, column types, row count and the
sum of row hashes), since hashing millions of rows in Python would take minutes at SF1. The
extensions load from their wheels; nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

import duckdb
import polars as pl

from scenarios.references import ReferencedWorld
from scenarios.tpch.build import TABLES, build_tables, connect, index_sqlite
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
        """About 60 s per unit of scale factor (SF1: `dbgen`, Parquet, SQLite and indexes)."""
        return 60.0 * float(scale_factor(snapshot))

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

    def _build_into(self, folder: Path, snapshot: str) -> None:
        sf = scale_factor(snapshot)
        parquet = folder / "parquet"
        parquet.mkdir()
        sqlite_path = folder / f"{self.name}.sqlite"
        counts = build_tables(sf, parquet, sqlite_path, folder / "spill")
        index_sqlite(sqlite_path)
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
