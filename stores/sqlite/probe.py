"""A perturbed SQLite dataset: TEMP views over the source per session, or a copy of them.

Each session opens the source read-only and creates, in its own TEMP schema, one view per
table under the table's name: SQLite resolves an unqualified name to TEMP first, so every
query reads the view. A view keeps the table's columns in order; it drops the rows whose
entity key hashes into one bucket of `DROP_ONE_IN` (`keep_sql`: SQLite's own integer
arithmetic on an integer key, `bi_hash`, a function registered on the connection, on any
other), the rows whose foreign key points at a dropped row (a semi-join on the parent's
view, so drops follow the keys to a fixpoint) and scales numeric columns by a factor between
1.0625 and 1.5 that varies with the value. The views read the source attached a second time
under an opaque per-session name, and every read of `main` (the source as the session opened
it) is refused by the authorizer, so a schema-qualified name cannot bypass the probe.
Building a session costs the same at 1 MB and 10 GB: nothing is read until a query runs.

`materialise` writes the same views into a SQLite file (streamed by SQLite, in bounded
memory): Python evidence reads it, and so does every session of a probe built with
`copy_in_background` (a query there costs what it costs on the source).
"""

from __future__ import annotations

import secrets
import sqlite3
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from stores.base import StoreError
from stores.common.sqlite_file import columns_read
from stores.probe import DROP_ONE_IN, TablePlan, ViewProbeStore, shift_factor
from stores.sqlite.build import quote_ident
from stores.sqlite.session import SQLiteSession

__all__ = [
    "DROP_ONE_IN",
    "SQLiteProbeSession",
    "SQLiteProbeStore",
    "TablePlan",
    "materialise",
    "view_statements",
]


_P = 2147483647
"""The prime 2**31 - 1: every product below stays under 2**63, in SQLite's integers."""


def text_hash(value: Any) -> int:
    """A non-integer key value's hash in [0, 2**31 - 1) (`bi_hash`, called only for them)."""
    return zlib.crc32(repr(value).encode()) % _P


def _mixed(terms: list[str], salt: int) -> str:
    """SQL for an integer hash of `terms` (each in [0, _P)): a Lehmer step per term, then a
    square modulo the prime, so neighbouring keys fall in unrelated buckets."""
    h = str(salt * 7919 + 12345)
    for term in terms:
        h = f"(({h}) * 48271 + {term}) % {_P}"
    return f"(((({h}) * ({h}) + {salt * 104729}) % {_P}) >> 11)"


def keep_sql(columns: list[str], salt: int, one_in: int = DROP_ONE_IN) -> str:
    """SQL that is true for a row to keep and false for one of the `DROP_ONE_IN` dropped,
    in SQLite's own arithmetic (an integer key costs a few opcodes, no Python call); a key
    value of another type goes through `bi_hash`."""
    terms = []
    for column in columns:
        c = quote_ident(column)
        terms.append(
            f"CASE WHEN typeof({c}) = 'integer' THEN (({c} % {_P}) + {_P}) % {_P} "
            f"ELSE bi_hash({c}) END"
        )
    return f"({_mixed(terms, salt)} % {one_in} != 0)"


def _lit(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _scaled(column: str, n: int, salt: int) -> str:
    c = quote_ident(column)
    bucket = f"((CAST({c} * 100 AS INTEGER) % 1000003 + 1000003) % 1000003)"
    step = f"(({bucket} * 2654435761 + {n * 97 + salt * 7919}) % 8 + 1)"
    return (
        f"CASE WHEN typeof({c}) IN ('integer', 'real') THEN {c} * (1 + {step} / 16.0) "
        f"ELSE {c} END AS {c}"
    )


def view_statements(plans: dict[str, TablePlan], salt: int, source: str = "main") -> list[str]:
    """`CREATE TEMP VIEW` statements, one per table, over the tables in schema `source`."""
    statements = []
    n = 0
    for table in sorted(plans):
        plan = plans[table]
        select = []
        for column in plan.columns:
            if column in plan.scale:
                n += 1
                select.append(_scaled(column, n, salt))
            elif column in plan.shift:
                c, k = quote_ident(column), shift_factor(salt)
                select.append(
                    f"CASE WHEN typeof({c}) = 'integer' THEN {c} + ({c} * {k}) / 16 "
                    f"ELSE {c} END AS {c}"
                )
            else:
                select.append(quote_ident(column))
        where = []
        if plan.key:
            where.append(keep_sql(plan.key, salt, plan.one_in))
        where += [
            f"({quote_ident(c)} IS NULL OR {quote_ident(c)} <> {_lit(v)})" for c, v in plan.exclude
        ]
        for cols, parent, pcols in plan.parents:
            nulls = " OR ".join(f"{quote_ident(c)} IS NULL" for c in cols)
            match = " AND ".join(
                f"p.{quote_ident(p)} = bi_t.{quote_ident(c)}"
                for c, p in zip(cols, pcols, strict=True)
            )
            where.append(
                f"({nulls} OR EXISTS (SELECT 1 FROM temp.{quote_ident(parent)} AS p WHERE {match}))"
            )
        statements.append(
            f"CREATE TEMP VIEW {quote_ident(table)} AS SELECT {', '.join(select)} "
            f"FROM {quote_ident(source)}.{quote_ident(table)} AS bi_t"
            + (f" WHERE {' AND '.join(where)}" if where else "")
        )
    return statements


class SQLiteProbeSession(SQLiteSession):
    """A read-only session whose tables are the probe's TEMP views. The views read the
    source attached a second time under an opaque per-session name; the authorizer refuses
    every read of `main` but its schema table, so `main.<table>` cannot bypass a view."""

    def __init__(
        self, path: Path, timeout_s: float, plans: dict[str, TablePlan], salt: int
    ) -> None:
        super().__init__(path, timeout_s)
        conn = self._conn
        assert conn is not None
        alias = f"bi_{secrets.token_hex(8)}"
        conn.set_authorizer(None)
        try:
            conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 1)
            conn.execute(f"ATTACH ? AS {alias}", (f"file:{quote(str(path.resolve()))}?mode=ro",))
            conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            conn.create_function("bi_hash", 1, text_hash, deterministic=True)
            conn.execute("PRAGMA query_only = OFF")
            for statement in view_statements(plans, salt, alias):
                conn.execute(statement)
            conn.execute("PRAGMA query_only = ON")
        except sqlite3.Error as exc:
            self.close()
            raise StoreError(f"cannot create the probe's views over {path}: {exc}") from exc
        conn.set_authorizer(self._authorize)

    def _authorize(self, action: int, arg1: str | None, arg2: str | None, *rest: Any) -> int:
        db = rest[0] if rest else None
        direct = action == sqlite3.SQLITE_READ and str(db).lower() == "main" and arg1
        if direct and not str(arg1).lower().startswith("sqlite_"):
            self._denials.append(
                f"main.{arg1} is read past the probe's view; name the table without its schema"
            )
            return sqlite3.SQLITE_DENY
        return super()._authorize(action, arg1, arg2, *rest)


class SQLiteProbeStore(ViewProbeStore):
    """The probe of one SQLite file and salt: sessions with the views, or (`copy_in_background`,
    `ViewProbeStore`) with the same tables written to a file, which SQLite streams in bounded
    memory; Python evidence reads that file too (built on its first use otherwise)."""

    backend = "sqlite"

    def __init__(
        self,
        path: Path,
        store_id: str,
        timeout_s: float,
        plans: dict[str, TablePlan],
        salt: int,
        materialise_to: Callable[[], Path] | None = None,
        copy_in_background: bool = False,
    ) -> None:
        self.store_id = store_id
        self._path = path
        self._timeout_s = timeout_s
        self._plans = plans
        self._salt = salt
        self._sessions: list[SQLiteSession] = []
        super().__init__(materialise_to, copy_in_background)

    def columns_read(self, sql: str) -> dict[str, set[str]] | None:
        """What SQLite's authorizer sees read preparing `sql` on the file (`columns_read`)."""
        path = self.mount_path
        return None if path is None else columns_read(path, sql)

    def connect(self) -> SQLiteSession:
        """A session on the copy once it is built (`copy`), else on the views."""
        session: SQLiteSession
        if (copy := self.copy()) is not None:
            session = SQLiteSession(copy, self._timeout_s)
        else:
            session = SQLiteProbeSession(self._path, self._timeout_s, self._plans, self._salt)
        self._sessions.append(session)
        return session

    def teardown(self) -> None:
        """Close the sessions; a copy under way is finished first."""
        for session in self._sessions:
            session.close()
        self._sessions.clear()
        self.finish_copy()


def materialise(source: Path, plans: dict[str, TablePlan], salt: int, dest: Path) -> None:
    """Write the perturbed tables into a new SQLite file `dest` with the source's own table,
    index and view definitions, streamed by SQLite (bounded memory)."""
    src = sqlite3.connect(f"file:{quote(str(source.resolve()))}?mode=ro", uri=True)
    try:
        schema = src.execute(
            "SELECT type, name, sql FROM sqlite_schema WHERE sql IS NOT NULL "
            "AND name NOT LIKE 'sqlite_%' AND type IN ('table', 'index', 'view')"
        ).fetchall()
    finally:
        src.close()
    out = sqlite3.connect(f"file:{quote(str(dest.resolve()))}", uri=True, isolation_level=None)
    try:
        out.execute("PRAGMA journal_mode = OFF")
        for kind, _, sql in schema:
            if kind == "table":
                out.execute(sql)
        out.execute("ATTACH ? AS bi_source", (f"file:{quote(str(source.resolve()))}?mode=ro",))
        out.create_function("bi_hash", 1, text_hash, deterministic=True)
        for statement in view_statements(plans, salt, "bi_source"):
            out.execute(statement)
        out.execute("BEGIN")
        for kind, name, _ in schema:
            if kind == "table":
                q = quote_ident(name)
                out.execute(f"INSERT INTO main.{q} SELECT * FROM temp.{q}")
        out.execute("COMMIT")
        for kind, _, sql in schema:
            if kind in ("index", "view"):
                out.execute(sql)
    finally:
        out.close()
