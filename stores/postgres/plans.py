"""The tables a PostgreSQL query reads, from its plan (`EXPLAIN (FORMAT JSON)`)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from stores.postgres.conn import adbc_module, query_error

__all__ = ["postgres_relations", "postgres_scans", "postgres_tables_read"]


def _explain_json(conn: Any, sql: str, where: str, timeout_s: float, verbose: bool = False) -> Any:
    """`EXPLAIN (FORMAT JSON)` of `sql`, read without COPY (which cannot wrap EXPLAIN)."""
    adbc = adbc_module()
    try:
        with conn.cursor() as cur:
            cur.adbc_statement.set_options(**{"adbc.postgresql.use_copy": "false"})
            how = "FORMAT JSON, VERBOSE" if verbose else "FORMAT JSON"
            cur.execute(f"EXPLAIN ({how}) {sql.strip().rstrip(';')}")
            return cur.fetch_arrow_table().column(0)[0].as_py()
    except adbc.Error as exc:
        raise query_error(exc, where, timeout_s) from exc
    finally:
        with contextlib.suppress(adbc.Error):
            conn.rollback()


def postgres_scans(conn: Any, sql: str, where: str, timeout_s: float) -> list[tuple[str, str, str]]:
    """(schema, relation, alias) of every relation PostgreSQL's plan for `sql` scans, with
    views expanded (`EXPLAIN (FORMAT JSON, VERBOSE)`, planned, never run)."""
    plan = _explain_json(conn, sql, where, timeout_s, verbose=True)
    nodes: list[Any] = [json.loads(plan) if isinstance(plan, str) else plan]
    found: list[tuple[str, str, str]] = []
    while nodes:
        node = nodes.pop()
        if isinstance(node, list):
            nodes.extend(node)
        elif isinstance(node, dict):
            if isinstance(node.get("Relation Name"), str):
                scan = (str(node.get("Schema", "")), node["Relation Name"], str(node.get("Alias")))
                found.append(scan)
            nodes.extend(v for v in node.values() if isinstance(v, list | dict))
    return found


def postgres_relations(plan: Any) -> set[str]:
    """Every `Relation Name` in a JSON plan (a text or decoded `EXPLAIN (FORMAT JSON)`)."""
    nodes: list[Any] = [json.loads(plan) if isinstance(plan, str) else plan]
    found: set[str] = set()
    while nodes:
        node = nodes.pop()
        if isinstance(node, list):
            nodes.extend(node)
        elif isinstance(node, dict):
            if isinstance(node.get("Relation Name"), str):
                found.add(node["Relation Name"])
            nodes.extend(v for v in node.values() if isinstance(v, list | dict))
    return found


def postgres_tables_read(conn: Any, sql: str, where: str, timeout_s: float) -> set[str]:
    """Relations in PostgreSQL's plan for `sql` (planned, never run)."""
    return postgres_relations(_explain_json(conn, sql, where, timeout_s))
