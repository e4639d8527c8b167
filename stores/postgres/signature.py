"""Whether a PostgreSQL database changed: a cheap catalog signature per trial, and a content
hash streamed once per state of the database.

Signature (`signature`, O(1) in the data's size: it reads catalogs, never a table): for every
relation of the database outside the system and temporary schemas, its schema, name, kind,
`relfilenode` and columns (name, type, typmod), and for every table its
`n_tup_ins`/`n_tup_upd`/`n_tup_del` from `pg_stat_all_tables`. The catalog part is
transactional and exact: DDL, TRUNCATE, VACUUM FULL or CLUSTER move it at commit. The write
counters are not: a backend publishes them to shared memory when it goes idle after its
transaction, at most once a second; one that published less than a second before waits for
its idle timeout (PGSTAT_IDLE_INTERVAL, 10 s), and one that ends publishes at once (PG 15's
shared-memory statistics). So a committed INSERT, UPDATE or DELETE reaches the signature
between at once and ~10 s later. `pg_stat_force_next_flush()` cannot help: it flushes only
the calling backend's counters, never the writer's; a transaction-id or WAL position signal
would be exact but is cluster-wide, so every write to any other database would force a
re-hash. Hence the signature is only the key of the content-hash cache, never proof of
sameness by itself, and a write the lag hides from one trial's check is caught later: each
new item compares the content with the run's first read (`stores.postgres.source`) and the
end of the run hashes it again without the cache. A rolled back write moves the counters but
not the content: the hash is recomputed and is the same.

Content hash (`content_hash`): every table's column names and types, its row count and, over
the rows' text forms (`t::text`, under fixed DateStyle, IntervalStyle, TimeZone,
extra_float_digits and bytea_output), the NUMERIC sum of one 64-bit hash of each row
(`hashtextextended`, seed 0) and the XOR of another (seed 1). Both aggregates are
order-independent, so PostgreSQL streams each table once, in bounded memory, with no sort:
1.6 M rows (95 MB) take 1.6 s here, where ordering them by every column took 50 s and an md5
per row 3 s. A row's duplicate counts twice in the sum and cancels in the XOR; together with
the count, a change goes unseen only if 128 bits of hashes collide.
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["SESSION_SETTINGS", "content_hash", "signature", "user_tables"]

SYSTEM_SCHEMAS = "('pg_catalog', 'information_schema', 'pg_toast')"
SESSION_SETTINGS = {
    "DateStyle": "ISO, MDY",
    "IntervalStyle": "postgres",
    "TimeZone": "UTC",
    "extra_float_digits": "1",
    "bytea_output": "hex",
}
"""What the text form of a row depends on, fixed for every connection that hashes."""

_RELATIONS = f"""
SELECT n.nspname::text, c.relname::text, c.relkind::text, c.relfilenode::text,
       coalesce(string_agg(a.attname || ':' || a.atttypid || ':' || a.atttypmod, ','
                           ORDER BY a.attnum), '')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE n.nspname NOT IN {SYSTEM_SCHEMAS} AND n.nspname NOT LIKE 'pg\\_temp\\_%'
  AND n.nspname NOT LIKE 'pg\\_toast\\_temp\\_%' AND c.relpersistence <> 't'
GROUP BY 1, 2, 3, 4 ORDER BY 1, 2
"""
_COUNTERS = f"""
SELECT s.schemaname::text, s.relname::text, s.n_tup_ins, s.n_tup_upd, s.n_tup_del
FROM pg_stat_all_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.schemaname NOT IN {SYSTEM_SCHEMAS} AND c.relpersistence <> 't' ORDER BY 1, 2
"""
_TABLES = f"""
SELECT n.nspname::text, c.relname::text FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'm') AND c.relpersistence <> 't' AND n.nspname NOT IN {SYSTEM_SCHEMAS}
  AND n.nspname NOT LIKE 'pg\\_temp\\_%' ORDER BY 1, 2
"""


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def signature(conn: Any) -> tuple[str, str]:
    """(catalog part, whole signature) over an autocommit psycopg connection (see the module
    docstring): the catalog part is exact, the whole one lags committed writes by up to ~10 s."""
    relations = hashlib.sha256(repr(conn.execute(_RELATIONS).fetchall()).encode()).hexdigest()
    counters = repr(conn.execute(_COUNTERS).fetchall())
    return relations, hashlib.sha256(f"{relations}\0{counters}".encode()).hexdigest()


def user_tables(conn: Any) -> list[tuple[str, str]]:
    """(schema, table) of every table and materialised view outside the system schemas."""
    return [(str(s), str(t)) for s, t in conn.execute(_TABLES).fetchall()]


def content_hash(conn: Any) -> str:
    """The content hash of the database (see the module docstring) over an autocommit
    psycopg connection: one sequential scan per table, all in one repeatable-read snapshot,
    so writers running meanwhile give one consistent state."""
    for name, value in SESSION_SETTINGS.items():
        conn.execute("SELECT set_config(%s, %s, false)", (name, value))
    digest = hashlib.sha256()
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    try:
        for schema, table in user_tables(conn):
            columns = conn.execute(
                "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped "
                "ORDER BY a.attnum",
                (f"{_q(schema)}.{_q(table)}",),
            ).fetchall()
            row = conn.execute(
                "SELECT count(*), coalesce(sum(hashtextextended(r, 0)::numeric), 0), "
                "coalesce(bit_xor(hashtextextended(r, 1)), 0) "
                f"FROM (SELECT t::text AS r FROM {_q(schema)}.{_q(table)} AS t) AS rows"
            ).fetchone()
            digest.update(repr((schema, table, columns, [str(v) for v in row])).encode())
    finally:
        conn.execute("ROLLBACK")
    return digest.hexdigest()
