"""Which functions an analyst's PostgreSQL statement may call.

Some functions of `pg_catalog` run SQL text or read a whole table, schema or database named
by their arguments (`query_to_xml('select ...')`, `table_to_xml('public.t'::regclass, ...)`,
`ts_stat('select ...')`): what they read is planned inside the function, so it never shows
in the statement's plan, and the tables-read check and the data probe's plan check cannot
see it. Every PostgreSQL session refuses a statement calling one of them
(`refused_builtin`, on the statement's tokens: string literals and comments cannot hide or
fake a call), as the DuckDB policy refuses `query` and `query_table`.

A data probe (`stores.postgres.probe`) also refuses every function, aggregate or operator
defined outside `pg_catalog` and `information_schema` (`outside_functions`): a LANGUAGE sql
or plpgsql function reads tables without the reads showing in the plan either, and an
immutable one runs while the statement is planned. PostgreSQL names them exactly: the
statement is made the body of a temporary view in a transaction that is rolled back (parsed
and analysed, never planned or run) and the view's dependencies (`pg_depend`, which records
every relation, function, aggregate and operator a query tree names that is not built in)
are read. A relation outside the session's own temporary schema is named there too, before
views are expanded: a view of the source's own that the probe left out may read nothing a
plan shows (`SELECT f() AS n`).
"""

from __future__ import annotations

import itertools
from typing import Any

from sqlglot import Dialect
from sqlglot.errors import TokenError
from sqlglot.tokenizer_core import TokenType

from stores.base import QueryRefused

__all__ = [
    "SQL_TEXT_FUNCTIONS",
    "outside_functions",
    "refuse_sql_text_functions",
    "refused_builtin",
    "view_calls",
]

_RUNS_SQL = "runs the SQL text it is given, which no check of the statement sees"
_READS_ALL = "reads every row of the table, schema or database it names, past any check"
SQL_TEXT_FUNCTIONS: dict[str, str] = {
    **dict.fromkeys(
        ["query_to_xml", "query_to_xmlschema", "query_to_xml_and_xmlschema", "cursor_to_xml",
         "cursor_to_xmlschema", "ts_stat", "ts_rewrite"],
        _RUNS_SQL,
    ),
    **dict.fromkeys(
        ["table_to_xml", "table_to_xmlschema", "table_to_xml_and_xmlschema", "schema_to_xml",
         "schema_to_xmlschema", "schema_to_xml_and_xmlschema", "database_to_xml",
         "database_to_xmlschema", "database_to_xml_and_xmlschema"],
        _READS_ALL,
    ),
}  # fmt: skip
"""`pg_catalog` functions refused on every PostgreSQL session, with why (`ts_rewrite` in all
its forms: its (tsquery, text) form runs the text)."""

_NAMES = {TokenType.VAR, TokenType.IDENTIFIER}
_STRINGS = {
    TokenType.STRING,
    TokenType.HEREDOC_STRING,
    TokenType.BYTE_STRING,
    TokenType.NATIONAL_STRING,
    TokenType.RAW_STRING,
    TokenType.BIT_STRING,
    TokenType.HEX_STRING,
    TokenType.UNICODE_STRING,
}


def refused_builtin(sql: str) -> str | None:
    """The first function of `SQL_TEXT_FUNCTIONS` that `sql` calls, or None. A statement the
    tokenizer cannot split is checked on its raw text instead (any mention followed by `(`)."""
    try:
        tokens = Dialect.get_or_raise("postgres").tokenize(sql)
    except TokenError:
        lowered = "".join(sql.lower().split())
        return next((f for f in SQL_TEXT_FUNCTIONS if f"{f}(" in lowered), None)
    for token, after in itertools.pairwise(tokens):
        if after.token_type != TokenType.L_PAREN or token.token_type in _STRINGS:
            continue
        quoted = token.token_type == TokenType.IDENTIFIER
        name = token.text if quoted else token.text.lower()
        if name in SQL_TEXT_FUNCTIONS:
            return name
    return None


def refuse_sql_text_functions(sql: str, where: str) -> None:
    """Raise `QueryRefused` naming the first `SQL_TEXT_FUNCTIONS` function `sql` calls."""
    name = refused_builtin(sql)
    if name is not None:
        raise QueryRefused(
            f"{name}() is refused on {where}: it {SQL_TEXT_FUNCTIONS[name]}; query the "
            "tables directly"
        )


_CALLED = """
WITH r AS (SELECT oid AS rule FROM pg_rewrite WHERE ev_class = {view}::regclass)
SELECT DISTINCT kind, schema, name FROM (
  SELECT CASE p.prokind WHEN 'a' THEN 'aggregate' WHEN 'w' THEN 'window function'
              ELSE 'function' END AS kind, n.nspname::text AS schema, p.proname::text AS name
  FROM pg_depend d JOIN pg_proc p ON d.refclassid = 'pg_proc'::regclass AND p.oid = d.refobjid
  JOIN pg_namespace n ON n.oid = p.pronamespace
  WHERE d.classid = 'pg_rewrite'::regclass AND d.objid = (SELECT rule FROM r)
  UNION ALL
  SELECT 'operator ' || o.oprname || ' calling', n.nspname::text, p.proname::text
  FROM pg_depend d JOIN pg_operator o ON d.refclassid = 'pg_operator'::regclass
    AND o.oid = d.refobjid
  JOIN pg_proc p ON p.oid = o.oprcode JOIN pg_namespace n ON n.oid = p.pronamespace
  WHERE d.classid = 'pg_rewrite'::regclass AND d.objid = (SELECT rule FROM r)
  UNION ALL
  SELECT 'relation', n.nspname::text, c.relname::text
  FROM pg_depend d JOIN pg_class c ON d.refclassid = 'pg_class'::regclass AND c.oid = d.refobjid
  JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE d.classid = 'pg_rewrite'::regclass AND d.objid = (SELECT rule FROM r)
    AND c.oid <> {view}::regclass AND n.oid <> pg_my_temp_schema()
) AS called
WHERE schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1 DESC, 2, 3
"""


def view_calls(cur: Any, view: str) -> list[tuple[str, str]]:
    """What the temporary view `view` (a name as SQL writes it, quoted when needed) calls
    or reads outside `pg_catalog`, `information_schema` and this session's temporary
    schema: (kind, schema.name), kind "relation", "function", "aggregate", "window function"
    or "operator <op> calling", relations first."""
    literal = "'" + f"pg_temp.{view}".replace("'", "''") + "'"
    cur.execute(_CALLED.format(view=literal))
    rows = cur.fetch_arrow_table().to_pylist()
    return [(r["kind"], f"{r['schema']}.{r['name']}") for r in rows]


def outside_functions(cur: Any, body: str, view: str) -> list[tuple[str, str]]:
    """What `body` (one query, already known to parse alone) calls outside `pg_catalog` and
    `information_schema` (`view_calls` of a temporary view `view` of it). Runs in the
    cursor's current transaction, which must be read-write; the caller rolls it back.
    PostgreSQL's errors are raised."""
    cur.execute(f"CREATE TEMP VIEW {view} AS SELECT 1 AS one FROM (\n{body}\n) AS q")
    return view_calls(cur, view)
