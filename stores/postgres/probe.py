"""A perturbed PostgreSQL source without a copy: TEMPORARY views per probe session.

Each probe session logs in as its probe's SELECT-only role (`stores.postgres.source`) and,
in one read-write transaction (the role can write nothing but its own temporary objects),
creates in its own `pg_temp` schema one view per planned table of `public`, under the
table's name. PostgreSQL searches `pg_temp` first for relations, so every unqualified name
in a query reads the view. A view keeps the table's columns in order; it drops the rows
whose entity key hashes into one bucket of `DROP_ONE_IN` (`hashtextextended`, seeded by the
salt), the rows whose foreign key points at a dropped row (a semi-join on the parent's view,
views created parents first) and scales numeric columns (NUMERIC/DECIMAL keep their scale,
REAL and DOUBLE their type) by a factor between 1.0625 and 1.5 that varies with the value.
Then the session is read-only again; building it reads no data, so it costs the same at 1 MB
and at 10 GB.

The source's own views and materialised views of `public` are recreated after them, as
temporary views from their definitions (unqualified names, so they read the probe's views;
one that cannot be recreated is left out). A schema-qualified name (`public."Invoice"`), or
a view left out, would read the table past the probe: before each statement runs, its plan
(`EXPLAIN (VERBOSE)`, views expanded) must scan every relation outside
`pg_catalog`/`information_schema` through this session's views (their scans carry an alias
with a per-session random token), otherwise the statement is refused, naming the table.
Before that, a statement may call no function, aggregate or operator defined outside
`pg_catalog` and name no relation outside the catalogs and the session's views
(`stores.postgres.policy`: what such a function reads never shows in a plan), nor read
`pg_statistic` (sampled values of the source's tables, behind `pg_stats`); a view of the
source's own that calls a function of its own is left out. The views vanish with the
session (PostgreSQL drops temporary objects when a session ends, also after a crash of the
client).
"""

from __future__ import annotations

import contextlib
import secrets
from typing import Any

from stores.base import (
    QueryError,
    QueryRefused,
    StoreError,
)
from stores.common.dsn import redact
from stores.postgres.conn import adbc_module, ident
from stores.postgres.plans import postgres_scans
from stores.postgres.policy import outside_functions, refused_builtin, view_calls
from stores.postgres.session import PostgresSession
from stores.postgres.source import ProvisionedPostgresSource
from stores.probe import TablePlan, ViewProbeStore, shift_factor

__all__ = ["PostgresProbeSession", "PostgresProbeStore", "view_statements"]

_CATALOGS = {"pg_catalog", "information_schema"}
_STATISTICS = {"pg_statistic", "pg_statistic_ext_data"}
_CHECKED: dict[tuple[str, str], list[tuple[str, str]]] = {}
"""What a statement calls or names outside the catalogs and the probe's views, by (source,
statement): the same for every probe session of a source while its catalog stays as it is
(a change to it ends the run as `infra_error`), so the two probes and later trials of the
same evidence reuse it."""
_CHECKED_MAX = 4096


def _parents_first(plans: dict[str, TablePlan]) -> list[str]:
    order: list[str] = []
    todo = sorted(plans)
    while todo:
        ready = [
            t for t in todo if all(p in order or p not in plans for _, p, _ in plans[t].parents)
        ]
        if not ready:  # the planner keeps the graph acyclic; never loop on a bad plan
            ready = todo[:1]
        order += ready
        todo = [t for t in todo if t not in ready]
    return order


def _factor(col: str, n: int, salt: int) -> str:
    seed = n * 97 + salt * 7919
    return f"(1 + ((hashtextextended({col}::text, {seed}) & 7) + 1) / 16.0)"


def _scaled(column: str, kind: str, n: int, salt: int) -> str:
    c = ident(column)
    factor = _factor(c, n, salt)
    kind = kind.lower()
    if kind.startswith(("numeric", "decimal")):
        scale = kind.split(",")[1].rstrip(") ") if "," in kind else ""
        expr = f"round({c} * {factor}, {scale})" if scale else f"{c} * {factor}"
    elif kind in ("real", "double precision"):
        expr = f"({c} * {factor})::{kind}"
    else:
        return c
    return f"{expr} AS {c}"


def _kept(alias: str, key: list[str], salt: int, one_in: int) -> str:
    """Whether the row keyed by `key` (columns of `alias`) is kept: its hash's bucket (one
    row in `one_in` goes)."""
    cols = [f"{alias}.{ident(c)}" for c in key]
    keyed = cols[0] if len(cols) == 1 else f"ROW({', '.join(cols)})"
    return f"(hashtextextended({keyed}::text, {salt}) & {one_in - 1}) <> 0"


def _root_key(
    plans: dict[str, TablePlan],
    types: dict[str, dict[str, str]],
    table: str,
    cols: list[str],
    parent: str,
    pcols: list[str],
) -> bool:
    """Whether `cols` point at `parent`'s entity key, of the same types, and `parent` points
    at no table itself: then a row's parent is kept exactly when the same hash of `cols`
    keeps it, a test PostgreSQL runs in parallel workers, where the semi-join on the parent's
    view is a subplan per row on one process (2-3x the query at 1 GB; docs/performance.md).
    A row pointing at no parent row at all (no declared foreign key) is kept by it."""
    mine, theirs = plans.get(parent), types.get(parent, {})
    return (
        mine is not None
        and not mine.parents
        and not mine.exclude
        and mine.key == pcols
        and all(types[table].get(c) == theirs.get(p) for c, p in zip(cols, pcols, strict=True))
    )


def view_statements(
    plans: dict[str, TablePlan], types: dict[str, dict[str, str]], salt: int, token: str
) -> list[str]:
    """`CREATE TEMP VIEW` statements over the tables of `public`, parents first."""
    statements = []
    n = 0
    alias = f"{token}_t"
    for table in _parents_first(plans):
        plan = plans[table]
        select = []
        for column in plan.columns:
            if column in plan.scale:
                n += 1
                select.append(_scaled(column, types[table][column], n, salt))
            elif column in plan.shift:
                c, k = ident(column), shift_factor(salt)
                grown = f"{c} + trunc({c}::numeric * {k} / 16)"
                select.append(f"({grown})::{types[table][column]} AS {c}")
            else:
                select.append(ident(column))
        where = []
        if plan.key:
            where.append(_kept(alias, plan.key, salt, plan.one_in))
        for col, value in plan.exclude:
            c = f"{alias}.{ident(col)}"
            where.append(f"({c} IS NULL OR {c} <> {_literal(value)})")
        for cols_, parent, pcols in plan.parents:
            nulls = " OR ".join(f"{alias}.{ident(c)} IS NULL" for c in cols_)
            if _root_key(plans, types, table, cols_, parent, pcols):
                one_in = plans[parent].one_in
                where.append(f"({nulls} OR {_kept(alias, cols_, salt, one_in)})")
                continue
            match = " AND ".join(
                f"{token}_p.{ident(p)} = {alias}.{ident(c)}"
                for c, p in zip(cols_, pcols, strict=True)
            )
            where.append(
                f"({nulls} OR EXISTS (SELECT 1 FROM pg_temp.{ident(parent)} AS {token}_p "
                f"WHERE {match}))"
            )
        statements.append(
            f"CREATE TEMP VIEW {ident(table)} AS SELECT {', '.join(select)} "
            f"FROM public.{ident(table)} AS {alias}"
            + (f" WHERE {' AND '.join(where)}" if where else "")
        )
    return statements


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _past(relation: str, where: str) -> str:
    return (
        f"{relation} is read past the probe's view on {where} (a schema-qualified name, or a "
        "view of the source's own the probe could not recreate); name the table without its "
        "schema"
    )


class PostgresProbeSession(PostgresSession):
    """A read-only session whose `public` tables are this session's temporary views."""

    def __init__(
        self,
        dsn: str,
        where: str,
        timeout_s: float,
        plans: dict[str, TablePlan],
        types: dict[str, dict[str, str]],
        salt: int,
        views: tuple[tuple[str, str], ...] | list[tuple[str, str]] = (),
        source: str = "",
    ) -> None:
        super().__init__(dsn, where, timeout_s)
        adbc = adbc_module()
        self._token = f"bi_{secrets.token_hex(6)}"
        self._source = source
        try:
            with self._conn.cursor() as cur:
                cur.execute("SET TRANSACTION READ WRITE")  # temporary objects only: no grant
                for statement in view_statements(plans, types, salt, self._token):
                    cur.execute(statement)
                for name, body in views:  # the source's own views, over the probe's
                    if refused_builtin(body) is not None:
                        continue  # then a read through it is refused, named
                    cur.execute("SAVEPOINT bi_view")
                    try:
                        cur.execute(f"CREATE TEMP VIEW {ident(name)} AS {body.rstrip(' ;')}")
                        if view_calls(cur, ident(name)):  # a function of the source's own
                            cur.execute("ROLLBACK TO SAVEPOINT bi_view")
                    except adbc.Error:
                        cur.execute("ROLLBACK TO SAVEPOINT bi_view")
            self._conn.commit()
        except adbc.Error as exc:
            self.close()
            text = redact(str(exc).strip(), dsn)
            if "temporary" in text and str(getattr(exc, "sqlstate", "")) == "42501":
                raise StoreError(
                    f"the data probe on {where} needs temporary views, and its role may not "
                    "create temporary objects in the source database: GRANT TEMPORARY ON "
                    "DATABASE <source> TO the role (PUBLIC has it unless revoked)"
                ) from None
            raise StoreError(f"cannot create the probe's views on {where}: {text}") from None

    def _calls_outside(self, cur: Any, body: str) -> str | None:
        """Why `body` (one query that parses) is refused for a function it calls or a
        relation it names outside `pg_catalog` and the session's views (or why it cannot be
        checked), or None (`stores.postgres.policy.outside_functions`)."""
        adbc = adbc_module()
        called = _CHECKED.get((self._source, body))
        if called is None:
            try:
                cur.execute("SET TRANSACTION READ WRITE")  # a temporary view only, rolled back
                called = outside_functions(cur, body, f"{self._token}_chk")
            except adbc.Error as exc:
                why = str(exc).strip().splitlines()[0]
                return f"the statement cannot be checked on {self._where} ({why})"
            finally:
                with contextlib.suppress(adbc.Error):
                    self._conn.rollback()
            if len(_CHECKED) >= _CHECKED_MAX:
                _CHECKED.clear()
            _CHECKED[(self._source, body)] = called
        if not called:
            return None
        kind, name = called[0]
        if kind == "relation":
            return _past(name, self._where)
        return (
            f"{kind} {name} is refused on {self._where}: it is defined outside pg_catalog, and "
            "what such a function reads never shows in the statement's plan, so it cannot be "
            "checked to read the probe's views; compute it in the query itself"
        )

    def _bypass(self, sql: str) -> str | None:
        """Why the plan of `sql` reads past this session's views (naming the relation), or
        None."""
        try:
            scans = postgres_scans(self._conn, sql, self._where, self._timeout_s)
        except QueryError as exc:  # it parsed, so this is unexpected: refuse, never pass
            return f"the statement cannot be checked on {self._where} ({exc})"
        for schema, relation, alias in scans:
            if schema in _CATALOGS and relation in _STATISTICS:
                return (
                    f"{schema}.{relation} is refused on {self._where}: it holds sampled "
                    "values of the source's own tables (pg_stats), past the probe's views"
                )
            if schema not in _CATALOGS and not alias.startswith(self._token):
                return _past(f"{schema}.{relation}", self._where)
        return None

    def _check(self, cur: Any, body: str) -> None:
        why = self._calls_outside(cur, body) or self._bypass(body)
        if why is not None:
            raise QueryRefused(why)


class PostgresProbeStore(ViewProbeStore):
    """The probe of one PostgreSQL source and salt: sessions with the views, logged in as
    the probe's own SELECT-only role (dropped at teardown)."""

    backend = "postgres"

    def __init__(
        self,
        item: ProvisionedPostgresSource,
        plans: dict[str, TablePlan],
        types: dict[str, dict[str, str]],
        salt: int,
        timeout_s: float,
        views: list[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__()  # no file to mount: Python evidence reads through the query channel
        self._item = item
        self._views = list(views or [])
        self.store_id = item.store_id
        self._plans = plans
        self._types = types
        self._salt = salt
        self._timeout_s = timeout_s
        self._sessions: list[PostgresProbeSession] = []

    def connect(self) -> PostgresProbeSession:
        args: tuple[Any, ...] = (
            self._plans,
            self._types,
            self._salt,
            self._views,
            self._item.source_where,
        )
        dsn = self._item.session_dsn()
        try:
            session = PostgresProbeSession(dsn, self.display_id, self._timeout_s, *args)
        except StoreError as exc:
            raise StoreError(redact(str(exc), dsn)) from None
        self._sessions.append(session)
        return session

    def teardown(self) -> None:
        for session in self._sessions:
            session.close()
        self._sessions.clear()
        self._item.teardown()
