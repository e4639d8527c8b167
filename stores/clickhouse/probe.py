"""A perturbed ClickHouse source without a copy: a database of views per probe.

Each probe (one salt) gets its own `bi_<hex>` database on the source's server
(`ClickHouseSourceStore.create_database`, listed for `backintel clean`) holding one view per
planned table, under the table's name, over the source's table. A view keeps the table's
columns in order and their types; it drops the rows whose entity key hashes into one bucket of
`DROP_ONE_IN` (`cityHash64` seeded by the salt), the rows whose key columns point at a row the
parent's view dropped (`IN (SELECT ... FROM <probe>.<parent>)`, views created parents first),
and scales Float and Decimal columns outside keys by a factor between 1.0625 and 1.5 that varies
with the value (a Decimal keeps its precision and scale: `CAST(toFloat64(c) * f AS <type>)`).
Building it reads no data, so it costs the same at 1 MB and at 10 GB.

The source's own views are left out of the probe (named in its notes): a statement reading one
fails on the probe, as on any table it does not have. The analyst's statements on the probe go
through the same check and `readonly=1` as on the item (`stores.clickhouse.server.ServerSession`):
the probe's database is the only one they reach, so a qualified name cannot read past the
views. They are sent with `enable_optimize_predicate_expression=1` (`ProbeSession`): 18.16
reads a view whole unless it may push the query's WHERE into it, so without it a key lookup
on a probe would scan the table.
"""

from __future__ import annotations

from stores.base import StoreError
from stores.clickhouse import policy
from stores.clickhouse.http import ClickHouseHTTPError, Rows
from stores.clickhouse.names import quote
from stores.clickhouse.server import ServerSession
from stores.clickhouse.source import ClickHouseSourceStore, ProvisionedClickHouseSource
from stores.probe import DROP_ONE_IN, TablePlan, ViewProbeStore

__all__ = ["ClickHouseProbeStore", "view_statements"]


def _parents_first(plans: dict[str, TablePlan]) -> list[str]:
    order: list[str] = []
    todo = sorted(plans)
    while todo:
        ready = [
            t for t in todo if all(p in order or p not in plans for _, p, _ in plans[t].parents)
        ]
        order += ready or todo[:1]  # the planner keeps the graph acyclic; never loop
        todo = [t for t in todo if t not in order]
    return order


def _text(column: str) -> str:
    return f"ifNull(toString({column}), '')"


def _scaled(column: str, kind: str, n: int, salt: int) -> str:
    c = quote(column)
    seed = n * 97 + salt * 7919
    factor = f"(1 + (cityHash64({_text(c)}, {seed}) % 8 + 1) / 16)"
    inner = kind[len("Nullable(") : -1] if kind.startswith("Nullable(") else kind
    if inner.startswith("Decimal"):
        return f"CAST(toFloat64({c}) * {factor} AS {kind}) AS {c}"
    if inner.startswith("Float"):
        return f"CAST({c} * {factor} AS {kind}) AS {c}"
    return c


def view_statements(
    source_db: str, plans: dict[str, TablePlan], types: dict[str, dict[str, str]], salt: int
) -> list[str]:
    """`CREATE VIEW {db}.<table>` statements over `source_db`'s tables, parents first (`{db}`
    stands for the probe's database, `ClickHouseSourceStore.create_database`)."""
    statements = []
    n = 0
    for table in _parents_first(plans):
        plan = plans[table]
        select = []
        for column in plan.columns:
            if column in plan.scale:
                n += 1
                select.append(_scaled(column, types[table][column], n, salt))
            else:
                select.append(quote(column))
        where = []
        if plan.key:
            keyed = ", ".join(_text(quote(c)) for c in plan.key)
            where.append(f"cityHash64({salt}, {keyed}) % {DROP_ONE_IN} != 0")
        for cols, parent, pcols in plan.parents:
            nulls = " OR ".join(f"isNull({quote(c)})" for c in cols)
            here = ", ".join(quote(c) for c in cols)
            there = ", ".join(quote(p) for p in pcols)
            if len(cols) > 1:
                here = f"({here})"
            where.append(f"({nulls} OR {here} IN (SELECT {there} FROM {{db}}.{quote(parent)}))")
        statements.append(
            "CREATE VIEW {db}."
            + f"{quote(table)} AS SELECT {', '.join(select)} FROM {quote(source_db)}.{quote(table)}"
            + (f" WHERE {' AND '.join(where)}" if where else "")
        )
    return statements


class ProbeSession(ServerSession):
    """The item's session class on a probe's database, sent with predicate pushdown on
    (`ClickHouseSourceStore.probe_analyst`): a key lookup reads a few granules, not the
    whole table under the view."""

    def _run(self, sql: str, analyst_sql: str | None = None) -> Rows:
        self._item.require()
        store = self._item.store
        client = store.probe_analyst if isinstance(store, ClickHouseSourceStore) else None
        if client is None:
            raise StoreError(f"{self._item.display_id}: the probe's store is not set up")
        try:
            return client.query(
                sql, database=self._item.store_id, timeout_s=store.statement_timeout_s + 30
            )
        except ClickHouseHTTPError as exc:
            where, timeout_s = self._item.display_id, store.statement_timeout_s
            raise policy.classify(str(exc), where, timeout_s, analyst_sql) from exc


class ClickHouseProbeStore(ViewProbeStore):
    """The probe of one ClickHouse source and salt: its database of perturbed views, read
    through the item's session class (no file to mount: Python evidence reads through the
    query channel)."""

    backend = "clickhouse-server"

    def __init__(
        self,
        store: ClickHouseSourceStore,
        plans: dict[str, TablePlan],
        types: dict[str, dict[str, str]],
        salt: int,
    ) -> None:
        super().__init__()
        statements = view_statements(store.source_db, plans, types, salt)
        self._item = ProvisionedClickHouseSource(store, store.create_database(statements))
        self.store_id = self._item.store_id

    def connect(self) -> ProbeSession:
        if self._item.store_id not in self._item.store.databases():
            raise StoreError(f"{self.display_id} was torn down")
        return ProbeSession(self._item)

    def teardown(self) -> None:
        self._item.teardown()
