"""Content fingerprints every backend can share: a type-tagged row encoding and file hashes.

The logical fingerprint is a SHA-256 over, per table in name order, the table name, its
(column, type) pairs and every row in the backend's canonical order (the backend sorts by every
column; `canonical_rows` sorts in Python for a backend that cannot). Every cell is encoded with a
type tag and a length, so `1`, `1.0`, `'1'`, `True` and NULL all differ and no two rows or tables
can run into each other. Signed zero is folded (`-0.0` encodes as `0.0`), because SQL compares
them equal and backends disagree on keeping the sign; the physical hash still sees the bytes.

`summary_digest` is the fast variant for engines that can hash rows themselves (DuckDB): per
table, instead of the rows, a summary the engine computes in one pass (row count and
order-independent aggregates of a per-row hash). Its digests are a different family
(`SUMMARY_VERSION`) and never equal a `logical_digest`; compare fingerprints of one backend only.
"""

from __future__ import annotations

import hashlib
import math
import struct
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path

from stores.base import StoreError

__all__ = [
    "FINGERPRINT_VERSION",
    "SUMMARY_VERSION",
    "LogicalHasher",
    "TableRows",
    "canonical_rows",
    "encode_cell",
    "encode_row",
    "file_hashes",
    "file_sha256",
    "logical_digest",
    "summary_digest",
    "tree_digest",
    "tree_sha256",
]

FINGERPRINT_VERSION = b"backintel-logical-v1"
"""Mixed into every logical digest; bump it when the encoding changes."""

SUMMARY_VERSION = b"backintel-logical-summary-v1"
"""Mixed into every summary digest; bump it when the summary changes."""

TableRows = tuple[str, Sequence[tuple[str, str]], Iterable[Sequence[object]]]
"""One table to hash: its name, its (column name, declared type) pairs and its rows."""

_SUPPORTED = (
    "None, bool, int, float, Decimal, str, bytes, date, datetime, time, timedelta, UUID, "
    "and lists/tuples/dicts of those"
)


def _frame(tag: bytes, payload: bytes) -> bytes:
    return tag + struct.pack(">Q", len(payload)) + payload


def encode_cell(value: object) -> bytes:
    """One value as tag + length + payload; equal encodings mean the same typed value."""
    if value is None:
        return b"N"
    if isinstance(value, bool):  # before int: True is an int
        return b"B1" if value else b"B0"
    if isinstance(value, int):
        return _frame(b"I", str(value).encode())
    if isinstance(value, float):
        if value == 0.0:
            value = 0.0  # fold -0.0
        text = "nan" if math.isnan(value) else value.hex()
        return _frame(b"F", text.encode())
    if isinstance(value, Decimal):
        return _frame(b"D", str(value).encode())
    if isinstance(value, str):
        return _frame(b"S", value.encode("utf-8", "surrogatepass"))
    if isinstance(value, bytes | bytearray | memoryview):
        return _frame(b"X", bytes(value))
    if isinstance(value, datetime):  # before date: a datetime is a date
        return _frame(b"T", value.isoformat().encode())
    if isinstance(value, date):
        return _frame(b"d", value.isoformat().encode())
    if isinstance(value, time):
        return _frame(b"t", value.isoformat().encode())
    if isinstance(value, timedelta):
        return _frame(b"P", f"{value.days},{value.seconds},{value.microseconds}".encode())
    if isinstance(value, uuid.UUID):
        return _frame(b"U", value.bytes)
    if isinstance(value, list | tuple):
        return _frame(b"L", b"".join(encode_cell(v) for v in value))
    if isinstance(value, Mapping):
        items = sorted((encode_cell(k), encode_cell(v)) for k, v in value.items())
        return _frame(b"M", b"".join(k + v for k, v in items))
    raise StoreError(
        f"cannot fingerprint a value of type {type(value).__name__} ({value!r:.60}); "
        f"supported: {_SUPPORTED}"
    )


def encode_row(row: Sequence[object]) -> bytes:
    """A whole row: its cell count, then each cell's encoding."""
    return b"R" + struct.pack(">I", len(row)) + b"".join(encode_cell(v) for v in row)


def canonical_rows(rows: Iterable[Sequence[object]]) -> list[bytes]:
    """Encoded rows sorted bytewise: a canonical order for backends that cannot sort in SQL.

    Holds every row in memory; prefer sorting by every column in the backend for big tables.
    """
    return sorted(encode_row(r) for r in rows)


class LogicalHasher:
    """Streams tables (in name order) and their rows (in canonical order) into one SHA-256."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256(FINGERPRINT_VERSION)
        self._last: str | None = None

    def add_table(
        self,
        name: str,
        columns: Sequence[tuple[str, str]],
        rows: Iterable[Sequence[object] | bytes],
    ) -> None:
        """Hash one table; `rows` are value sequences or already-encoded rows (`encode_row`)."""
        if self._last is not None and name <= self._last:
            raise StoreError(
                f"fingerprint tables must come in strictly increasing name order: "
                f"{name!r} came after {self._last!r}"
            )
        self._last = name
        header = _frame(b"C", b"".join(encode_cell(n) + encode_cell(t) for n, t in columns))
        self._hash.update(_frame(b"T", name.encode()) + header)
        count = 0
        for row in rows:
            self._hash.update(row if isinstance(row, bytes) else encode_row(row))
            count += 1
        self._hash.update(b"E" + struct.pack(">Q", count))

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def logical_digest(tables: Iterable[TableRows]) -> str:
    """The logical fingerprint of tables given in name order, each with canonically ordered rows."""
    hasher = LogicalHasher()
    for name, columns, rows in tables:
        hasher.add_table(name, columns, rows)
    return hasher.hexdigest()


def summary_digest(
    tables: Iterable[tuple[str, Sequence[tuple[str, str]], Sequence[object]]],
) -> str:
    """SHA-256 over, per table in strictly increasing name order, its name, (column, type)
    pairs and the engine's summary of its rows (a sequence of plain values, e.g. count, sum and
    xor of a per-row hash)."""
    digest = hashlib.sha256(SUMMARY_VERSION)
    last: str | None = None
    for name, columns, summary in tables:
        if last is not None and name <= last:
            raise StoreError(
                f"fingerprint tables must come in strictly increasing name order: "
                f"{name!r} came after {last!r}"
            )
        last = name
        header = _frame(b"C", b"".join(encode_cell(n) + encode_cell(t) for n, t in columns))
        digest.update(_frame(b"T", name.encode()) + header + encode_row(summary))
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes (the physical fingerprint of a single-file store)."""
    try:
        with path.open("rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError as exc:
        raise StoreError(f"cannot hash store file {path}: {exc}") from exc


def tree_sha256(root: Path) -> str:
    """SHA-256 over every file under `root`: relative path and bytes, in sorted path order."""
    return tree_digest(file_hashes(root))


def file_hashes(root: Path) -> list[tuple[str, str]]:
    """(relative path, SHA-256 of its bytes) of every file under `root`, in sorted path order."""
    if not root.is_dir():
        raise StoreError(f"cannot hash store folder {root}: not a directory")
    paths = sorted(p for p in root.rglob("*") if p.is_file())
    return [(path.relative_to(root).as_posix(), file_sha256(path)) for path in paths]


def tree_digest(hashes: Iterable[tuple[str, str]]) -> str:
    """`tree_sha256` from the files' hashes (`file_hashes`)."""
    digest = hashlib.sha256(b"backintel-tree-v1")
    for rel, sha in hashes:
        digest.update(_frame(b"P", rel.encode()) + _frame(b"H", sha.encode()))
    return digest.hexdigest()
