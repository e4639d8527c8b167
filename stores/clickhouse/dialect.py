"""Rewrites a SQLite check query needs before sqlglot writes it as ClickHouse SQL.

ClickHouse formats and rounds only typed values, decorrelates scalar subqueries into joins
(a correlated COUNT over no rows comes back NULL, not 0) and runs correlated subqueries
neither inside an aggregate's argument nor in ORDER BY. Each rewrite keeps SQLite's meaning:

- `strftime(fmt, x)`: `x` parsed first (`parseDateTime64BestEffortOrNull`, NULL when it is
  not a timestamp, as SQLite); `ROUND(x, n)` on the shortest decimal form of `x` (half away
  from zero, as SQLite); `CAST(... AS INTEGER)` as 64-bit; `date(x, modifier...)`, which
  ClickHouse would silently ignore the modifiers of, raises instead;
- a scalar subquery whose one value is a COUNT: `COALESCE((...), 0)`;
- correlated subqueries inside aggregates of a one-table SELECT: computed per row in a
  derived table of the same alias, aggregated outside;
- ORDER BY (and LIMIT/OFFSET) of a SELECT whose projections hold a subquery: applied by an
  outer `SELECT *` over it, by output column name.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

__all__ = ["rewrite"]

_DATE_FUNCTIONS = {"date", "datetime", "time"}


def rewrite(tree: exp.Expr) -> exp.Expr:
    """`tree` (parsed from SQLite) rewritten for ClickHouse; see the module docstring."""
    tree = tree.transform(_typed_values)
    tree = tree.transform(_count_never_null)
    for select in list(tree.find_all(exp.Select)):
        _aggregate_subqueries(select)
    for select in list(tree.find_all(exp.Select)):
        outer = _order_outside(select)
        if outer is not None and select is tree:
            tree = outer
    return tree


def _ch(node: exp.Expr) -> str:
    return node.sql(dialect="clickhouse")


def _parse(text: str) -> exp.Expr:
    return sqlglot.parse_one(text, read="clickhouse")


def _typed_values(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.TimeToStr):
        inner = node.this.this if isinstance(node.this, exp.TsOrDsToTimestamp) else node.this
        node.set("this", _parse(f"parseDateTime64BestEffortOrNull(toString({_ch(inner)}), 6)"))
    elif isinstance(node, exp.Round):
        node.set("this", _parse(f"toDecimal128OrNull(toString({_ch(node.this)}), 12)"))
    elif isinstance(node, exp.DataType) and node.this == exp.DataType.Type.INT:
        return exp.DataType.build("BIGINT")  # SQLite's INTEGER is 64 bits
    elif (
        isinstance(node, exp.Date | exp.Anonymous)
        and len(node.expressions) > 1
        and (isinstance(node, exp.Date) or node.name.lower() in _DATE_FUNCTIONS)
    ):
        raise ValueError(f"no ClickHouse translation for {node.sql(dialect='sqlite')}")
    return node


def _scalar(node: exp.Expr) -> bool:
    """A subquery used as a value (not a FROM/JOIN source, not the right side of IN)."""
    return isinstance(node, exp.Subquery) and not isinstance(node.parent, exp.From | exp.Join)


def _count_never_null(node: exp.Expr) -> exp.Expr:
    if not _scalar(node) or isinstance(node.parent, exp.Coalesce):
        return node
    select = node.this
    if not isinstance(select, exp.Select) or len(select.expressions) != 1:
        return node
    value = select.expressions[0]
    value = value.this if isinstance(value, exp.Alias) else value
    if isinstance(value, exp.Count) and not select.args.get("group"):
        return exp.Coalesce(this=node, expressions=[exp.Literal.number(0)])
    return node


def _aggregate_subqueries(select: exp.Select) -> None:
    """`AGG((SELECT f(..) FROM t AS a WHERE a.k = outer.k AND ...))` in a one-table SELECT:
    the subquery becomes a LEFT JOIN on `t` grouped by `a.k` (standard decorrelation; a
    missing group is NULL, and a COUNT's NULL was already wrapped in COALESCE)."""
    source = select.args.get("from_")
    if source is None or select.args.get("joins") or not isinstance(source.this, exp.Table):
        return
    for agg in [a for p in select.expressions for a in p.find_all(exp.AggFunc)]:
        for sub in [s for s in agg.find_all(exp.Subquery) if _scalar(s)]:
            joined = _grouped_join(sub, f"_sq{len(select.args.get('joins') or [])}")
            if joined is not None:
                source_join, value = joined
                select.append("joins", source_join)
                sub.replace(value)


def _grouped_join(sub: exp.Subquery, name: str) -> tuple[exp.Join, exp.Expression] | None:
    inner = sub.this
    if not isinstance(inner, exp.Select) or len(inner.expressions) != 1:
        return None
    table = inner.args.get("from_")
    if table is None or not isinstance(table.this, exp.Table) or inner.args.get("joins"):
        return None
    if inner.args.get("group") or inner.args.get("having") or inner.args.get("limit"):
        return None
    alias = table.this.alias_or_name
    where = inner.args.get("where")
    predicates = (
        list(where.this.flatten())
        if where is not None and isinstance(where.this, exp.And)
        else [where.this]
        if where is not None
        else []
    )
    keys, rest = [], []
    for pred in predicates:
        tables = {c.table for c in pred.find_all(exp.Column)}
        if tables <= {alias, ""}:
            rest.append(pred)
        elif isinstance(pred, exp.EQ) and len(tables - {alias, ""}) == 1:
            sides = [pred.this, pred.expression]
            own = [x for x in sides if isinstance(x, exp.Column) and x.table == alias]
            other = [x for x in sides if isinstance(x, exp.Column) and x.table not in (alias, "")]
            if len(own) != 1 or len(other) != 1:
                return None
            keys.append((own[0], other[0]))
        else:
            return None
    if len(keys) != 1:
        return None
    key, outer = keys[0]
    value = inner.expressions[0]
    value = value.this if isinstance(value, exp.Alias) else value
    grouped = exp.select(exp.alias_(key.copy(), "_k"), exp.alias_(value.copy(), "_v"))
    grouped = grouped.from_(table.this.copy()).group_by(key.copy())
    if rest:
        grouped = grouped.where(exp.and_(*[p.copy() for p in rest]))
    join = exp.Join(
        this=exp.Subquery(this=grouped, alias=exp.TableAlias(this=exp.to_identifier(name))),
        side="LEFT",
        on=exp.EQ(this=exp.column("_k", table=name), expression=outer.copy()),
    )
    return join, exp.column("_v", table=name)


def _order_outside(select: exp.Select) -> exp.Select | None:
    """The outer SELECT now holding `select`'s ORDER BY, or None when nothing moved."""
    order = select.args.get("order")
    subqueries = [s for p in select.expressions for s in p.find_all(exp.Subquery)]
    if order is None or not any(_scalar(s) for s in subqueries):
        return None
    inner = select.copy()
    for key in ("order", "limit", "offset"):
        inner.set(key, None)
    outer = exp.select(exp.Star()).from_(
        exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier("_ordered")))
    )
    order = order.copy()
    for column in list(order.find_all(exp.Column)):
        column.replace(exp.column(column.name))
    outer.set("order", order)
    for key in ("limit", "offset"):
        if select.args.get(key) is not None:
            outer.set(key, select.args[key].copy())
    select.replace(outer)
    return outer
