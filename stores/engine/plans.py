"""Which tables a query reads, from the engine's own plan: `StoreSession.tables_read` for the
DuckDB-based backends and PostgreSQL (SQLite's lives in `stores.sqlite.store`, by its authorizer).

Evidence that reads no table of the store supports nothing; the plan, not the SQL text, says
what is read, so `SELECT 3715` reads nothing while `SELECT 3715 FROM orders` reads `orders`.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import duckdb

from stores.engine.policy import classify_error, serialized_sql

__all__ = [
    "DuckDBPlans",
    "duckdb_tables_read",
]


class DuckDBPlans:
    """`tables_read` for a DuckDB session holding `_conn`, `_lock` and `_where`."""

    _conn: duckdb.DuckDBPyConnection
    _lock: threading.Lock
    _where: str

    def tables_read(self, sql: str) -> set[str]:
        """The scans in DuckDB's plan (`EXPLAIN (FORMAT JSON)`): tables, files, attachments."""
        with self._lock:
            return duckdb_tables_read(self._conn, sql, self._where)


_NOT_DATA = {"DUMMY_SCAN", "COLUMN_DATA_SCAN", "CHUNK_SCAN", "CTE_SCAN", "DELIM_SCAN"}
"""Plan scans that read no stored data: a literal row, VALUES, CTE and correlated buffers."""


def duckdb_tables_read(conn: duckdb.DuckDBPyConnection, sql: str, where: str) -> set[str]:
    """What the plan of `sql` scans, by table name (or the scan function, for views over
    files). When the optimiser answered from metadata without a scan (`COUNT(*)` of a table),
    the tables the parsed statement names instead: such a query still reads its table."""
    statement = sql.strip().rstrip(";")
    try:
        row = conn.execute(f"EXPLAIN (FORMAT JSON) {statement}").fetchone()
    except duckdb.Error as exc:
        raise classify_error(exc, where) from exc
    found = _plan_scans(json.loads(row[1]) if row else [])
    return found or _named_tables(conn, statement)


def _plan_scans(plan: list[Any]) -> set[str]:
    found: set[str] = set()
    nodes = list(plan)
    while nodes:
        node = nodes.pop()
        if not isinstance(node, dict):
            continue
        nodes.extend(node.get("children") or [])
        name, info = str(node.get("name", "")), node.get("extra_info") or {}
        if ("SCAN" in name or name.startswith("READ_")) and name not in _NOT_DATA:
            label = info.get("Table") or info.get("Function") or name
            found.add(str(label).rsplit(".", 1)[-1])
    return found


def _named_tables(conn: duckdb.DuckDBPyConnection, statement: str) -> set[str]:
    """Base tables the parser finds in `statement`, CTE names excluded."""
    text = serialized_sql(conn, statement)
    tables: set[str] = set()
    ctes: set[str] = set()
    nodes: list[Any] = [json.loads(text)] if text is not None else []
    while nodes:
        node = nodes.pop()
        if isinstance(node, list):
            nodes.extend(node)
        elif isinstance(node, dict):
            if node.get("type") == "BASE_TABLE" and isinstance(node.get("table_name"), str):
                tables.add(node["table_name"])
            for entry in (node.get("cte_map") or {}).get("map") or []:
                ctes.add(str(entry.get("key")))
            nodes.extend(v for v in node.values() if isinstance(v, list | dict))
    return tables - ctes
