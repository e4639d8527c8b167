"""DuckDB's one-pass summary of a SQLite file's tables, for `sqlite_source_fingerprint`.

The built worlds' SQLite copies keep the sorted-rows family (`stores.fingerprint.LogicalHasher`,
`sqlite_logical_fingerprint`): exact, but it sorts every table by every column and encodes each
cell in Python, some 60 s per GB. A user's file used in place (`stores.sqlite.source`) is named
instead by `stores.sqlite.fingerprint.sqlite_source_fingerprint`: per table, DuckDB reads the
file through its SQLite scanner, in parallel and in `MEMORY_LIMIT`, and sums a per-row hash
order-independently (the summary family of `stores.engine.common.logical_fingerprint`).

DuckDB reads a SQLite value exactly only as BIGINT, DOUBLE or VARCHAR, and then refuses any value
of another storage class than its column's (text in an INTEGER column, a blob in a TEXT one).
It would merge what SQLite keeps apart in other columns: in a column without a declared type,
`1`, `1.0` and `'1'` read alike; in a DATETIME column, two spellings of one instant. A table with
such a column, or a value DuckDB refuses, is hashed the sorted, exact way instead, and is slower
for it; the digest says per table which way it was read, so the two never compare equal.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stores.base import StoreError
from stores.sqlite.build import quote_ident

__all__ = ["EXACT_TYPES", "duckdb_row_summaries"]

EXACT_TYPES = frozenset({"BIGINT", "DOUBLE", "VARCHAR"})
"""DuckDB column types its SQLite scanner reads without merging values SQLite tells apart."""
MEMORY_LIMIT = "128MB"
"""What DuckDB may hold while it hashes (an aggregate without groups needs next to nothing)."""


_ENGINE: list[Any] = []
"""One in-memory DuckDB with the SQLite scanner loaded (0.1 to 0.5 s), shared by every call of
the process through its own cursor; created on first use."""
_ENGINE_LOCK = threading.Lock()


def _engine() -> Any:
    import duckdb

    from stores.engine.extensions import load_extensions

    with _ENGINE_LOCK:
        if not _ENGINE:
            conn = duckdb.connect(config={"memory_limit": MEMORY_LIMIT})
            try:
                load_extensions(conn, ["sqlite_scanner"])
            except StoreError:
                conn.close()
                raise
            _ENGINE.append(conn)
        return _ENGINE[0].cursor()


def duckdb_row_summaries(path: Path, tables: Sequence[str]) -> dict[str, tuple[object, ...]]:
    """(row count, 128-bit sum, xor) of DuckDB's per-row hash, for each table of `tables`
    whose columns DuckDB reads exactly (`EXACT_TYPES`) and whose every value it accepts.
    Tables left out are for the caller to hash another way; so is every table when DuckDB or
    its SQLite scanner is not available."""
    try:
        import duckdb

        from stores.engine.policy import quote_literal
    except ImportError:
        return {}
    try:
        conn = _engine()
    except (duckdb.Error, StoreError):
        return {}
    alias = f"src_{secrets.token_hex(6)}"
    try:
        conn.execute(f"ATTACH {quote_literal(str(path))} AS {alias} (TYPE sqlite, READ_ONLY)")
        try:
            return {t: s for t in tables if (s := _summary(conn, alias, t)) is not None}
        finally:
            conn.execute(f"DETACH {alias}")
    except duckdb.Error:
        return {}
    finally:
        conn.close()


def _summary(conn: Any, alias: str, table: str) -> tuple[object, ...] | None:
    import duckdb

    name = f"{alias}.{quote_ident(table)}"
    try:
        described = conn.execute(f"DESCRIBE {name}").fetchall()
        if not described or any(str(r[1]) not in EXACT_TYPES for r in described):
            return None
        row_hash = f"hash({', '.join(quote_ident(str(r[0])) for r in described)})"
        rows = f"(SELECT {row_hash} AS h FROM {name})"
        row = conn.execute(f"SELECT count(*), sum(h::HUGEINT), bit_xor(h) FROM {rows}").fetchone()
    except duckdb.Error:  # a value of another storage class than its column's, a bad UTF-8 ...
        return None
    return tuple(row) if row is not None else None
