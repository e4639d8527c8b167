"""The keys a database declares: each table's primary key and its foreign keys, read from the
engine's own catalog (SQLite `PRAGMA table_info` / `foreign_key_list`, DuckDB
`duckdb_constraints()`, the PostgreSQL catalog), for whoever needs a table's entities and
their dependants without guessing them from column names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DeclaredKeys",
    "ForeignKey",
    "duckdb_declared_keys",
    "postgres_declared_keys",
    "sqlite_declared_keys",
]

ForeignKey = tuple[str, list[str], str, list[str]]
"""(table, columns, referenced table, referenced columns), as the source declares it."""


@dataclass
class DeclaredKeys:
    """Primary keys by table (columns in key order) and foreign keys, as declared."""

    primary: dict[str, list[str]] = field(default_factory=dict)
    foreign: list[ForeignKey] = field(default_factory=list)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def sqlite_declared_keys(con: Any, tables: list[str]) -> DeclaredKeys:
    """The keys of `tables` on a `sqlite3` connection. A foreign key that names no parent
    column refers to the parent's primary key (SQLite's rule)."""
    keys = DeclaredKeys()
    for table in tables:
        info = con.execute(f"PRAGMA table_info({_q(table)})").fetchall()
        pk = sorted((row[5], row[1]) for row in info if row[5])
        if pk:
            keys.primary[table] = [name for _, name in pk]
    by_id: dict[tuple[str, int], ForeignKey] = {}
    for table in tables:
        for fk_id, _seq, parent, col, pcol, *_ in con.execute(
            f"PRAGMA foreign_key_list({_q(table)})"
        ):
            _, cols, _, pcols = by_id.setdefault((table, fk_id), (table, [], parent, []))
            cols.append(col)
            pcols.append(pcol)
    for table, cols, parent, pcols in by_id.values():
        if any(p is None for p in pcols):
            pcols = list(keys.primary.get(parent, []))
        if len(pcols) == len(cols):
            keys.foreign.append((table, cols, parent, pcols))
    return keys


def duckdb_declared_keys(con: Any, schema: str = "main") -> DeclaredKeys:
    """The keys of the tables in `schema` on a DuckDB connection."""
    keys = DeclaredKeys()
    rows = con.execute(
        "SELECT table_name, constraint_type, constraint_column_names, referenced_table, "
        "referenced_column_names FROM duckdb_constraints() WHERE schema_name = ? "
        "AND constraint_type IN ('PRIMARY KEY', 'FOREIGN KEY')",
        [schema],
    ).fetchall()
    for table, kind, cols, parent, pcols in rows:
        if kind == "PRIMARY KEY":
            keys.primary[table] = list(cols)
        else:
            keys.foreign.append((table, list(cols), parent, list(pcols)))
    return keys


_PG_KEYS = """
SELECT co.contype::text, cl.relname::text, array_agg(a.attname::text ORDER BY k.n),
       coalesce(pr.relname::text, ''),
       array_remove(array_agg(pa.attname::text ORDER BY k.n), NULL)
FROM pg_constraint co
JOIN pg_class cl ON cl.oid = co.conrelid
JOIN pg_namespace ns ON ns.oid = cl.relnamespace AND ns.nspname = %s
LEFT JOIN pg_class pr ON pr.oid = co.confrelid
CROSS JOIN LATERAL unnest(co.conkey, coalesce(co.confkey, co.conkey)) WITH ORDINALITY
    AS k(col, pcol, n)
JOIN pg_attribute a ON a.attrelid = co.conrelid AND a.attnum = k.col
LEFT JOIN pg_attribute pa ON pa.attrelid = co.confrelid AND pa.attnum = k.pcol
WHERE co.contype IN ('p', 'f')
GROUP BY co.oid, co.contype, cl.relname, pr.relname
"""


def postgres_declared_keys(con: Any, schema: str = "public") -> DeclaredKeys:
    """The keys of the tables in `schema` on a psycopg connection (read from the catalog)."""
    keys = DeclaredKeys()
    for kind, table, cols, parent, pcols in con.execute(_PG_KEYS, (schema,)).fetchall():
        if kind == "p":
            keys.primary[table] = list(cols)
        else:
            keys.foreign.append((table, list(cols), parent, list(pcols)))
    return keys
