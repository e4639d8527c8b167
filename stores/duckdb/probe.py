"""A perturbed DuckDB, Parquet or CSV source without a copy: views over the source, per session.

Each session is an in-memory DuckDB database whose `main` schema holds one view per table
under the table's name, over the source made readable under an opaque per-session alias
(`DuckDBSource.attach`: the DuckDB file attached read-only, or a schema of views over the
folder's files). A view keeps the table's columns in order; it drops the rows whose entity
key hashes into one bucket of `DROP_ONE_IN` (DuckDB's `hash` with the salt), the rows whose
foreign key points at a dropped row (a semi-join on the parent's view, so drops follow the
keys to a fixpoint) and rescales FLOAT, DOUBLE and DECIMAL columns by a factor between 1.0625
and 1.5 that varies with the value, keeping the column's type. `main.<table>` and
`memory.main.<table>` are the views; the source's alias is random per session, and the SQL
policy refuses `query_table`, ATTACH and file functions, so a schema-qualified name cannot
bypass the probe. A session costs the same at 1 MB and 10 GB: nothing is read until a
query runs.

`materialise` writes the same views as files (`COPY`, streamed by DuckDB in bounded memory)
for what must see a file: Python evidence in a sandbox, and every session of a probe built
with `copy_in_background` once they are written. Over a Parquet folder a view costs 3-4x the
query (it reads the key and foreign-key columns the query does not, hashes every row and
semi-joins the parent; docs/performance.md), the copy what the query costs on the source.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path

import duckdb

from stores.base import StoreError
from stores.duckdb.reading import DuckDBSource, lock_down, open_attached, open_source
from stores.engine.common import BASE_CONFIG, DuckDBSession, quote_ident, quote_literal
from stores.engine.process import IsolatedSession
from stores.probe import TablePlan, ViewProbeStore, shift_factor

__all__ = [
    "DuckDBProbeStore",
    "materialise",
    "open_probe",
    "scalable",
    "view_statements",
]

_SCALABLE = re.compile(
    r"(FLOAT|DOUBLE|REAL|FLOAT4|FLOAT8|DECIMAL(\(\d+,\s*\d+\))?|NUMERIC(\(\d+,\s*\d+\))?)"
)


MATERIALISE_MEMORY = "128MB"
"""DuckDB's memory while it writes a probe's files (it spills to disk past this)."""


def scalable(sql_type: str) -> bool:
    """A DuckDB column type the probe rescales in place (floating point and DECIMAL)."""
    return _SCALABLE.fullmatch(sql_type.upper().strip()) is not None


def _scaled(column: str, sql_type: str, n: int, salt: int) -> str:
    c = quote_ident(column)
    step = f"(hash({n * 97 + salt * 7919}, {c}) % 8 + 1)"
    return f"COALESCE(TRY_CAST({c} * (1 + {step} / 16.0) AS {sql_type}), {c}) AS {c}"


def view_statements(
    plans: dict[str, TablePlan],
    types: dict[str, dict[str, str]],
    salt: int,
    source: str,
) -> list[str]:
    """`CREATE VIEW main.<table>` statements, one per table, over `<source>.<table>`; parents
    are created before the tables that point at them."""
    statements: dict[str, str] = {}
    n = 0
    for table in sorted(plans):
        plan = plans[table]
        select = []
        for column in plan.columns:
            sql_type = types[table].get(column, "")
            if column in plan.scale and scalable(sql_type):
                n += 1
                select.append(_scaled(column, sql_type, n, salt))
            elif column in plan.shift and sql_type:
                c, k = quote_ident(column), shift_factor(salt)
                grown = f"{c} + (CAST({c} AS HUGEINT) * {k}) // 16"
                select.append(f"COALESCE(TRY_CAST({grown} AS {sql_type}), {c}) AS {c}")
            else:
                select.append(quote_ident(column))
        where = []
        if plan.key:
            keys = ", ".join(quote_ident(c) for c in plan.key)
            where.append(f"hash({salt}, {keys}) % {plan.one_in} <> 0")
        for col, value in plan.exclude:
            c = f"bi_t.{quote_ident(col)}"
            where.append(f"({c} IS NULL OR {c} <> {quote_literal(value)})")
        for cols, parent, pcols in plan.parents:
            nulls = " OR ".join(f"bi_t.{quote_ident(c)} IS NULL" for c in cols)
            pairs = []
            for c, p in zip(cols, pcols, strict=True):
                mine, theirs = f"bi_t.{quote_ident(c)}", f"p.{quote_ident(p)}"
                if types[table].get(c) != types[parent].get(p):
                    mine, theirs = f"CAST({mine} AS VARCHAR)", f"CAST({theirs} AS VARCHAR)"
                pairs.append(f"{theirs} = {mine}")
            where.append(
                f"({nulls} OR EXISTS (SELECT 1 FROM main.{quote_ident(parent)} AS p "
                f"WHERE {' AND '.join(pairs)}))"
            )
        statements[table] = (
            f"CREATE VIEW main.{quote_ident(table)} AS SELECT {', '.join(select)} "
            f"FROM {quote_ident(source)}.{quote_ident(table)} AS bi_t"
            + (f" WHERE {' AND '.join(where)}" if where else "")
        )
    ordered: list[str] = []
    done: set[str] = set()

    def add(table: str) -> None:
        if table in done:
            return
        done.add(table)
        for _, parent, _ in plans[table].parents:
            if parent in plans:
                add(parent)
        ordered.append(statements[table])

    for table in sorted(plans):
        add(table)
    return ordered


def open_probe(
    source: DuckDBSource,
    plans: dict[str, TablePlan],
    types: dict[str, dict[str, str]],
    salt: int,
    *,
    locked: bool = True,
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection whose `main` tables are the probe's views over `source`
    (attached under a random alias); locked down unless `locked` is False (materialising)."""
    conn = duckdb.connect(config=dict(BASE_CONFIG))
    alias = f"bi_{secrets.token_hex(8)}"
    try:
        source.attach(conn, alias)
        for statement in view_statements(plans, types, salt, alias):
            conn.execute(statement)
        if locked:
            lock_down(conn, source.allowed())
    except duckdb.Error as exc:
        conn.close()
        raise StoreError(f"cannot create the probe's views over {source.location}: {exc}") from exc
    return conn


class DuckDBProbeStore(ViewProbeStore):
    """The probe of one DuckDB-served source and salt: sessions over the views, or (with
    `copy_in_background`, `ViewProbeStore`) over the same tables written as files by
    `materialise_to`, which Python evidence reads too (built on its first use otherwise)."""

    def __init__(
        self,
        backend: str,
        store_id: str,
        timeout_s: float,
        source: DuckDBSource,
        plans: dict[str, TablePlan],
        types: dict[str, dict[str, str]],
        salt: int,
        materialise_to: Callable[[], Path] | None = None,
        copy_in_background: bool = False,
    ) -> None:
        self.backend = backend
        self.store_id = store_id
        self._timeout_s = timeout_s
        self._source = source
        self._plans = plans
        self._types = types
        self._salt = salt
        super().__init__(materialise_to, copy_in_background)

    def local_session(self) -> DuckDBSession:
        """The guarded session over the views in this process."""
        return self._opener()()

    def connect(self) -> IsolatedSession:
        return IsolatedSession(self._opener(), where=self.display_id, timeout_s=self._timeout_s)

    def _opener(self) -> Callable[[], DuckDBSession]:
        """What an engine child needs to open the session (not the materialising builder): on
        the copy once it is built (`copy`), else on the views."""
        if (copy := self.copy()) is not None:
            return partial(_copy_session, self._source.kind, copy, self._timeout_s, self.display_id)
        return partial(
            _probe_session,
            self._source,
            self._plans,
            self._types,
            self._salt,
            self._timeout_s,
            self.display_id,
        )

    def teardown(self) -> None:
        """Sessions are closed by their users; a copy under way is finished."""
        self.finish_copy()


def _probe_session(
    source: DuckDBSource,
    plans: dict[str, TablePlan],
    types: dict[str, dict[str, str]],
    salt: int,
    timeout_s: float,
    where: str,
) -> DuckDBSession:
    conn = open_probe(source, plans, types, salt)
    return DuckDBSession(conn, timeout_s=timeout_s, where=where)


def _copy_session(kind: str, copy: Path, timeout_s: float, where: str) -> DuckDBSession:
    """A guarded session on the materialised copy (`materialise`'s result) of a `kind` source,
    its tables under their names in `main`, as on the views."""
    conn = open_attached(copy) if kind == "duckdb" else open_source(DuckDBSource(kind, copy), "1GB")
    return DuckDBSession(conn, timeout_s=timeout_s, where=where)


def materialise(
    source: DuckDBSource,
    plans: dict[str, TablePlan],
    types: dict[str, dict[str, str]],
    salt: int,
    dest: Path,
) -> Path:
    """Write the perturbed tables under the new folder `dest` in the source's own form (one
    DuckDB file `data.duckdb`; `<table>.parquet`; `<table>.csv` with `_schema.json` pinning
    the types), streamed by DuckDB. Returns what a sandbox mounts."""
    dest.mkdir(parents=True, exist_ok=True)
    conn = open_probe(source, plans, types, salt, locked=False)
    try:
        spill = dest / ".spill"  # DuckDB spills here past its memory limit, bounded memory
        conn.execute(f"SET temp_directory = {quote_literal(str(spill))}")
        conn.execute(f"SET memory_limit = {quote_literal(MATERIALISE_MEMORY)}")
        conn.execute("SET preserve_insertion_order = false")
        if source.kind == "duckdb":
            out = dest / "data.duckdb"
            conn.execute(f"ATTACH {quote_literal(str(out))} AS bi_out")
            for table in sorted(plans):
                q = quote_ident(table)
                conn.execute(f"CREATE TABLE bi_out.main.{q} AS SELECT * FROM main.{q}")
            conn.execute("DETACH bi_out")
            shutil.rmtree(dest / ".spill", ignore_errors=True)
            return out
        out = dest / "data"
        out.mkdir()
        for table in sorted(plans):
            q = quote_ident(table)
            target = quote_literal(str(out / f"{table}.{source.kind}"))
            options = "FORMAT parquet" if source.kind == "parquet" else "HEADER, DELIMITER ','"
            conn.execute(f"COPY (SELECT * FROM main.{q}) TO {target} ({options})")
        if source.kind == "csv":
            (out / "_schema.json").write_text(json.dumps(types, indent=1))
        return out
    finally:
        conn.close()
        shutil.rmtree(dest / ".spill", ignore_errors=True)
