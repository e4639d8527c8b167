"""Change detection for a ClickHouse source used in place (`stores.clickhouse.source`).

`signature` is read from the catalog only, never from the data, so it costs the same at 1 MB
and at 10 GB: each table's engine, `metadata_modification_time` and `create_table_query`
(`system.tables`), its columns and types (`system.columns`), and its active data parts
(`system.parts`: name, rows, bytes on disk, modification time). An INSERT, a mutation
(`ALTER ... UPDATE/DELETE`), a merge, a DETACH or a DROP makes or removes a part, so every write
to a MergeTree table changes it. Tables of the Log and Memory families have no parts: a write to
one of them is seen by the content hash at the end of the run, not by the per-trial signature.

`content_hash` is computed by ClickHouse itself, in one aggregate per table over the rows'
hashes (`count()`, `sum` and `groupBitXor` of `cityHash64` of every column as text, with a NULL
flag per Nullable column), so the harness holds one row per table whatever the size. ClickHouse
18.16's `cityHash64` takes no Decimal and returns NULL for a NULL argument, hence the `toString`
and `isNull`. Views are hashed through the tables they read (their definition is in the
signature).
"""

from __future__ import annotations

import hashlib

from stores.clickhouse.http import HttpClient
from stores.clickhouse.names import literal, quote

__all__ = ["SERVED_ENGINES", "content_hash", "served_tables", "signature", "table_columns"]

SERVED_ENGINES = ("Log", "TinyLog", "StripeLog", "Memory", "View", "MaterializedView")
"""Engines served besides the MergeTree family; a table of any other engine (Kafka,
Distributed, URL, File, MySQL, Dictionary, Buffer, Null, Set, ...) reads outside the
source database and is neither shown to the analyst nor hashed."""


def _served(name: str, engine: str) -> bool:
    return not name.startswith(".inner.") and (
        engine.endswith("MergeTree") or engine in SERVED_ENGINES
    )


def served_tables(admin: HttpClient, db: str) -> list[tuple[str, str]]:
    """(name, engine) of the source's tables the analyst reads, by name; a materialised
    view's storage (`.inner.<name>`) is read through the view."""
    found = admin.query(
        f"SELECT name, engine FROM system.tables WHERE database = {literal(db)} ORDER BY name"
    )
    return [(str(n), str(e)) for n, e in found.rows if _served(str(n), str(e))]


def table_columns(admin: HttpClient, db: str) -> dict[str, list[tuple[str, str]]]:
    """Table -> [(column, type)] in table order (`system.columns` keeps it)."""
    found = admin.query(
        f"SELECT table, name, type FROM system.columns WHERE database = {literal(db)}"
    )
    out: dict[str, list[tuple[str, str]]] = {}
    for table, name, kind in found.rows:
        out.setdefault(str(table), []).append((str(name), str(kind)))
    return out


def signature(admin: HttpClient, db: str) -> str:
    """The catalog signature of database `db` (see the module docstring), as a hex digest."""
    where = f"database = {literal(db)}"
    tables = admin.post(
        "SELECT name, engine, metadata_modification_time, create_table_query FROM system.tables "
        f"WHERE {where} ORDER BY name FORMAT TSVRaw"
    )
    columns = admin.post(
        f"SELECT table, name, type FROM system.columns WHERE {where} FORMAT TSVRaw"
    )
    parts = admin.post(
        "SELECT table, name, rows, bytes_on_disk, modification_time FROM system.parts "
        f"WHERE {where} AND active ORDER BY table, name FORMAT TSVRaw"
    )
    digest = hashlib.sha256(b"backintel-clickhouse-source-signature-v1\0")
    for text in (tables, columns, parts):
        digest.update(text.encode() + b"\0")
    return digest.hexdigest()


def _row_hash(columns: list[tuple[str, str]]) -> str:
    args: list[str] = []
    for name, kind in columns:
        q = quote(name)
        if kind.startswith("Nullable("):
            args += [f"isNull({q})", f"ifNull(toString({q}), '')"]
        else:
            args.append(f"toString({q})")
    return f"cityHash64({', '.join(args)})"


def content_hash(admin: HttpClient, db: str, timeout_s: float = 3600) -> str:
    """The content of every served table of `db`, hashed by the server (module docstring)."""
    digest = hashlib.sha256(b"backintel-clickhouse-source-content-v1\0")
    columns = table_columns(admin, db)
    for name, engine in served_tables(admin, db):
        cols = columns.get(name, [])
        digest.update(f"{name}\0{cols!r}\0".encode())
        if engine in ("View", "MaterializedView") or not cols:
            continue
        target = f"{quote(db)}.{quote(name)}"
        found = admin.post(
            f"SELECT count(), sum(h), groupBitXor(h) FROM (SELECT {_row_hash(cols)} AS h "
            f"FROM {target}) FORMAT TSVRaw",
            timeout_s=timeout_s,
        )
        digest.update(found.encode() + b"\0")
    return digest.hexdigest()
