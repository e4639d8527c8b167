"""The name and version of each way a source's data hash is computed.

A lock file entry and a run record name the method behind their data hash, so a hash computed
by another method (an older release of this harness) is never mistaken for other data. The
current method of each kind of source, and the older ones the harness can still compute:

- `sqlite-summary-v1`: a SQLite file used in place, DuckDB's one-pass summary per table where it
  reads the table exactly, sorted rows elsewhere (`stores.sqlite.fingerprint.
  sqlite_source_fingerprint`, since the one-pass summary came in). Before it, such a file was
  hashed as `sqlite-sorted-rows-v1` (`sqlite_logical_fingerprint`), which the harness still has.
- `duckdb-summary-v1`: a DuckDB file, Parquet or CSV folder (`stores.engine.common.
  logical_fingerprint`).
- `postgres-row-hash-v2`: a PostgreSQL database (`stores.postgres.signature.content_hash`,
  `hashtextextended` per row); `postgres-md5-v1`, its md5 predecessor, is gone.
- `clickhouse-content-v1`: a ClickHouse database (`stores.clickhouse.signature.content_hash`).

Change a method's code and its name here changes with it (a new version); keep the old one in
`OLDER` while the harness can still compute it.
"""

from __future__ import annotations

__all__ = ["CURRENT", "LEGACY", "OLDER", "current_method"]

CURRENT: dict[str, str] = {
    "sqlite": "sqlite-summary-v1",
    "duckdb": "duckdb-summary-v1",
    "parquet": "duckdb-summary-v1",
    "csv": "duckdb-summary-v1",
    "postgres": "postgres-row-hash-v2",
    "clickhouse": "clickhouse-content-v1",
}
"""Kind of source -> the method this harness computes its data hash with."""

OLDER: dict[str, tuple[str, ...]] = {"sqlite": ("sqlite-sorted-rows-v1",)}
"""Kind of source -> older methods this harness can still compute (newest first)."""

LEGACY: dict[str, tuple[str, ...]] = {
    "sqlite": ("sqlite-sorted-rows-v1", "sqlite-summary-v1"),
    "postgres": ("postgres-md5-v1", "postgres-row-hash-v2"),
}
"""Kind of source -> the methods a lock written before methods were named (format 1) may
have used; a kind not listed had only its current one."""


def current_method(kind: str) -> str:
    """The method of `kind` (a source kind; any other name is its own method)."""
    return CURRENT.get(kind, f"{kind}-v1")
