"""Which tables a ClickHouse statement reads, from ClickHouse's own trees (never the SQL text).

chDB: `query_tree_tables` reads `EXPLAIN QUERY TREE` (the analyzer's resolved tree: a CTE or
alias of a table's name is resolved, a constant `SELECT` reads `system.one`, which is not the
item's). A server whose ClickHouse has no `EXPLAIN` (18.16): `ast_tables` reads chDB's
`EXPLAIN AST` of the same text and names every item table that occurs as a table or an
identifier, so a CTE or column spelt like a table counts as read (too many, never too few: a
literal is never taken for a read, and a read never for a literal only when it names no table).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["ast_tables", "query_tree_tables"]

_TABLE = re.compile(r"^\s*TABLE id: \d+(?:, alias: [^,]+)?, table_name: (.+)$")
_IDENT = re.compile(r"^\s*(?:TableIdentifier|Identifier) (.+?)(?: \(alias .*\))?$")


def query_tree_tables(tree: str, database: str) -> set[str]:
    """The tables of `database` that an `EXPLAIN QUERY TREE` output reads."""
    prefix = f"{database}."
    found = set()
    for line in tree.splitlines():
        match = _TABLE.match(line)
        if match and match.group(1).startswith(prefix):
            found.add(match.group(1).removeprefix(prefix))
    return found


def ast_tables(ast: str, database: str, tables: Iterable[str]) -> set[str]:
    """The tables of `tables` named (bare or qualified by `database`) in an `EXPLAIN AST`."""
    known = set(tables)
    found = set()
    for line in ast.splitlines():
        match = _IDENT.match(line.replace("\\'", "'"))
        if match is None:
            continue
        name = match.group(1).strip().removeprefix(f"{database}.")
        if name in known:
            found.add(name)
    return found
