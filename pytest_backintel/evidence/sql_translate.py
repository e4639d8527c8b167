"""A check query in SQLite's dialect as the same query in another backend's (see `dialects`).

sqlglot does the translation; the few SQLite date functions it passes through untouched
(`julianday`, `unixepoch`) are rewritten here into each target's epoch arithmetic.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from stores.registry import load_dialect_rewrite

__all__ = ["translate_from_sqlite"]

SOURCE_DIALECT = "sqlite"

_EPOCH_SQL = {
    "duckdb": "epoch(CAST({arg} AS TIMESTAMP))",
    "postgres": "EXTRACT(EPOCH FROM CAST({arg} AS TIMESTAMP))",
    "clickhouse": "toFloat64(parseDateTime64BestEffortOrNull(toString({arg}), 6, 'UTC'))",
    "mysql": "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', {arg}) / 1000000.0)",
}


def _rewrite_dates(node: exp.Expr, dialect: str) -> exp.Expr:
    if not isinstance(node, exp.Anonymous) or node.name.lower() not in {"julianday", "unixepoch"}:
        return node
    if len(node.expressions) != 1:
        return node
    arg = node.expressions[0].sql(dialect=dialect)
    epoch = _EPOCH_SQL[dialect].format(arg=arg)
    text = epoch if node.name.lower() == "unixepoch" else f"({epoch} / 86400.0 + 2440587.5)"
    return sqlglot.parse_one(text, read=dialect)


def _rewrite_epoch_format(node: exp.Expr, dialect: str) -> exp.Expr:
    """`strftime('%s', x)`, SQLite's seconds since the epoch, as the target's epoch."""
    fmt = node.args.get("format") if isinstance(node, exp.TimeToStr) else None
    if not (isinstance(fmt, exp.Literal) and fmt.this == "%s"):
        return node
    inner = node.this.this if isinstance(node.this, exp.TsOrDsToTimestamp) else node.this
    epoch = _EPOCH_SQL[dialect].format(arg=inner.sql(dialect=dialect))
    return sqlglot.parse_one(f"CAST({epoch} AS BIGINT)", read=dialect)


def _round_numeric(node: exp.Expression) -> exp.Expression:
    """PostgreSQL rounds to a number of places only on NUMERIC."""
    if isinstance(node, exp.Round) and node.args.get("decimals") is not None:
        node.set("this", exp.Cast(this=node.this, to=exp.DataType.build("NUMERIC")))
    return node


def _truth_values(node: exp.Expression) -> exp.Expression:
    """SQLite's truth values are the integers 0 and 1 wherever they are used as values (summed,
    averaged, selected); the others have booleans, so the integers are spelled out."""
    predicate = exp.Predicate | exp.Connector | exp.Not
    if isinstance(node, exp.Sum | exp.Avg | exp.Alias) and isinstance(node.this, predicate):
        case = exp.Case(
            ifs=[exp.If(this=node.this.copy(), true=exp.Literal.number(1))],
            default=exp.Literal.number(0),
        )
        node.set("this", case)
    return node


def _alias_subqueries(tree: exp.Expression) -> exp.Expression:
    """PostgreSQL requires an alias on every subquery in FROM."""
    for n, sub in enumerate(tree.find_all(exp.Subquery)):
        if not sub.alias and isinstance(sub.parent, exp.From | exp.Join):
            sub.set("alias", exp.TableAlias(this=exp.to_identifier(f"_sub{n}")))
    return tree


def translate_from_sqlite(sql: str, dialect: str) -> str:
    """`sql` (SQLite dialect) as the same query in `dialect` (`duckdb`, `postgres`,
    `clickhouse`)."""
    if dialect not in _EPOCH_SQL:
        raise ValueError(
            f"no SQL translation to {dialect!r}; known: sqlite, duckdb, postgres, clickhouse, mysql"
        )
    tree = sqlglot.parse_one(sql, read=SOURCE_DIALECT)
    tree = tree.transform(lambda node: _rewrite_dates(node, dialect))
    tree = tree.transform(lambda node: _rewrite_epoch_format(node, dialect))
    tree = tree.transform(_truth_values)
    if dialect == "postgres":
        tree = _alias_subqueries(tree.transform(_round_numeric))
    rewrite = load_dialect_rewrite(dialect)  # the backend's own (ClickHouse's scalar subqueries)
    if rewrite is not None:
        tree = rewrite(tree)
    return tree.sql(dialect=dialect)
