"""A hostile analyst on every backend: file, network, privilege, write, resource and output
attacks through the analyst's `run_sql` tool (a scripted FunctionModel driving the real
agent) and through evidence re-execution, each refused, leaving the fingerprint unchanged and
the harness's memory bounded. No backend is skipped: one that cannot run fails here."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from analyst.agent import OUTPUT_TOOL_NAMES, ModelAnalyst
from analyst.tools import TOOL_RESULT_BYTES
from pytest_backintel.analyst_api import AnalystLimits, AnalystTask
from pytest_backintel.contract import AnalystAnswer
from pytest_backintel.evidence.reexecute import EvidenceBudget, EvidenceClock, reexecute
from pytest_backintel.scenario import Scenario
from stores.base import DatasetFiles, ProvisionedStore, QueryRefused, Store
from stores.registry import load_store_class

MULTI = "multi:postgres:olist_orders+sqlite:olist_catalog"
BACKENDS = ["sqlite", "duckdb", "postgres", "lake-parquet", "files", "files-mixed", "iceberg",
            MULTI]  # fmt: skip
DUCKDB_FAMILY = {"duckdb", "lake-parquet", "files", "files-mixed", "iceberg", "multi"}
N_ORDERS = 3000
"""More rows than one DuckDB vector, so `LIMIT 4` cannot hide a per-vector cost."""


def _dataset(root: Path) -> DatasetFiles:
    folder = root / "parquet"
    folder.mkdir(parents=True)
    orders = pa.table(
        {
            "id": pa.array(range(N_ORDERS), pa.int64()),
            "status": pa.array(["delivered", "canceled", "shipped"] * (N_ORDERS // 3)),
        }
    )
    pq.write_table(orders, folder / "orders.parquet")
    pq.write_table(pa.table({"k": pa.array([1, 2], pa.int64())}), folder / "extra.parquet")
    return DatasetFiles("hostile", folder)


class Backend:
    """One backend with two provisioned items: the target and "another item"."""

    def __init__(self, spec: str, root: Path) -> None:
        self.spec = spec
        self.family = spec.split(":", 1)[0]
        # a generous statement limit: the huge-value queries must end capped, not timed out,
        # on a loaded CI machine
        self.store: Store = load_store_class(spec)(root / "work", statement_timeout_s=60)
        self.store.setup_session()
        dataset = _dataset(root)
        self.item = self.store.provision(dataset)
        self.other = self.store.provision(dataset)
        self.alias = spec.rsplit(":", 1)[-1] if self.family == "multi" else ""
        """The last component of a multi spec (the one attacks address)."""
        self.orders = f"{self.alias}.orders" if self.alias else "orders"

    @property
    def dialect(self) -> str:
        return "duckdb" if self.family in DUCKDB_FAMILY else self.family

    def other_file(self) -> Path:
        """A file of the other item that a scanner could open."""
        other: Any = self.other
        if self.family == "multi":
            other = other.components[self.alias]
        path = other.mount_path or other.root
        return Path(path if path.is_file() else next(p for p in path.rglob("*") if p.is_file()))

    def close(self) -> None:
        for item in (self.item, self.other):
            item.teardown()
        self.store.teardown_session()


@pytest.fixture(scope="module", params=BACKENDS)
def backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Backend]:
    b = Backend(request.param, tmp_path_factory.mktemp(request.param.replace(":", "_")[:20]))
    yield b
    b.close()


def listener() -> socket.socket:
    """A TCP port nothing else uses; `accepted(sock)` tells whether anyone connected."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    sock.setblocking(False)
    return sock


def accepted(sock: socket.socket) -> bool:
    try:
        sock.accept()[0].close()
    except BlockingIOError:
        return False
    return True


def attacks(b: Backend, port: int) -> list[str]:
    """Statements that must be refused on `b`, by kind of attack."""
    writes = [
        f"DELETE FROM {b.orders}",
        f"UPDATE {b.orders} SET status = 'x'",
        f"INSERT INTO {b.orders} (id) VALUES (1)",
        "CREATE TABLE pwned (a INTEGER)",
        f"DROP TABLE {b.orders}",
        f"SELECT 1; DELETE FROM {b.orders}",
    ]
    if b.dialect == "sqlite":
        return [*writes,
                f"ATTACH '{b.other_file()}' AS other",
                "PRAGMA writable_schema = ON",
                "SELECT load_extension('/tmp/x.so')",
                "COPY orders TO '/tmp/pwned.csv'",
                "SET x = 1"]  # fmt: skip
    if b.dialect == "postgres":
        return [*writes,
                "SELECT rolname, rolpassword FROM pg_authid",
                "SELECT pg_read_file('/etc/passwd')",
                "SELECT lo_import('/etc/passwd')",
                "COPY orders TO '/tmp/pwned.csv'",
                "SET ROLE postgres",
                "CREATE ROLE pwned SUPERUSER",
                "WITH gone AS (DELETE FROM orders RETURNING *) "
                "SELECT count(*) FROM gone"]  # fmt: skip
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    return [*writes,
            f"SELECT * FROM sqlite_scan('{b.other_file()}', 'orders')",
            "SELECT * FROM postgres_scan('host=127.0.0.1 user=postgres dbname=postgres', "
            "'pg_catalog', 'pg_authid')",
            f"SELECT * FROM postgres_scan('{dsn}', 'pg_catalog', 'pg_authid')",
            f"SELECT * FROM postgres_query('{dsn}', 'SELECT 1')",
            f"SELECT * FROM sqlite_attach('{b.other_file()}')",
            "SELECT * FROM read_csv('/etc/passwd')",
            "SELECT * FROM read_text('/etc/hostname')",
            "SELECT * FROM glob('/*')",
            "SELECT * FROM '/etc/passwd'",
            f"SELECT * FROM read_parquet('{b.other_file()}')",
            "SELECT * FROM query('SELECT 42')",
            "SELECT current_setting('allowed_directories')",
            "SELECT * FROM duckdb_databases()",
            f"ATTACH '{b.other_file()}' AS other (TYPE sqlite)",
            "INSTALL httpfs",
            "LOAD sqlite_scanner",
            "SET enable_external_access = true",
            "COPY (SELECT 1) TO '/tmp/pwned.csv'",
            "EXPLAIN ANALYZE SELECT * FROM read_csv('/etc/passwd')"]  # fmt: skip


def scripted(calls: list[ToolCallPart], seen: list[Any]) -> FunctionModel:
    """A model that sends `calls` one by one, records every tool return, then answers."""
    queue = list(calls)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest):
            seen.extend(p.content for p in last.parts if p.part_kind == "tool-return")
        if queue:
            return ModelResponse(parts=[queue.pop(0)])
        answer = {"metrics": [{"name": "n", "value": 1, "unit": "rows"}],
                  "evidence": [{"id": "e1", "kind": "sql", "code": "SELECT 1 AS n",
                                "metrics": ["n"]}]}  # fmt: skip
        return ModelResponse(parts=[ToolCallPart(OUTPUT_TOOL_NAMES[0], answer)])

    return FunctionModel(respond)


def through_tool(item: ProvisionedStore, statements: list[str]) -> list[str]:
    """What the real `run_sql` tool returned to the model for each statement."""
    seen: list[Any] = []
    model = scripted([ToolCallPart("run_sql", {"sql": s}) for s in statements], seen)
    limits = AnalystLimits(max_requests=500, max_tool_calls=500)
    task = AnalystTask("hostile", item.connect, item.display_id, limits)
    run = ModelAnalyst(model, name="hostile").answer(task)
    assert run.error is None, run.error
    assert len(seen) == len(statements)
    return [str(s) for s in seen]


SCENARIO = Scenario.model_validate(
    {"id": "hostile", "version": 1, "title": "hostile", "question": "hostile",
     "dataset": {"world": "olist"}, "split": "development", "level": 1, "family": "hostile",
     "answerable": True, "check_sql": "SELECT 1 AS n",
     "metrics": [{"name": "n", "kind": "count", "unit": "rows"}]}
)  # fmt: skip


def through_evidence(item: ProvisionedStore, statements: list[str]) -> list[Any]:
    """The re-execution of each statement cited as SQL evidence for metric `n`."""
    answer = AnalystAnswer.model_validate(
        {"metrics": [{"name": "n", "value": 1, "unit": "rows"}],
         "evidence": [{"id": f"e{i}", "kind": "sql", "code": s, "metrics": ["n"]}
                      for i, s in enumerate(statements)]}
    )  # fmt: skip
    # every attack is re-executed: no evidence budget cuts the list short
    clock = EvidenceClock(EvidenceBudget(max_items=len(statements), time_s=3600))
    return reexecute(answer, SCENARIO, item, clock=clock)


def test_every_attack_is_refused_on_both_paths_and_nothing_changes(backend: Backend) -> None:
    item = backend.item
    before = item.fingerprint()
    sock = listener()
    statements = attacks(backend, sock.getsockname()[1])
    try:
        for sql in statements:
            with item.connect() as session, pytest.raises(QueryRefused):
                session.run_sql(sql)
        returned = through_tool(item, statements)
        evidence = through_evidence(item, statements)
        assert not accepted(sock), "a query opened a network connection"
    finally:
        sock.close()
    refused = [s for s, r in zip(statements, returned, strict=True) if r.startswith("ERROR (")]
    assert refused == statements
    assert [(r.ran, bool(r.error), r.ok) for r in evidence] == [(False, True, False)] * len(
        statements
    )
    assert item.fingerprint() == before
    # a plain query still works afterwards, on both paths
    assert through_tool(item, [f"SELECT count(*) AS n FROM {backend.orders}"]) == [
        f"n\n{N_ORDERS}\n[1 row(s)]"
    ]


HUGE: dict[str, list[str]] = {
    "sqlite": ["zeroblob(600000000)", "randomblob(600000000)", "printf('%.600000000c', 'x')",
               "hex(zeroblob(300000000))"],
    "duckdb": ["repeat('x', 600000000)", "repeat('x', 600000000 + id)",
               "lpad('x', 600000000, 'y')", "range(100000000)",
               "(SELECT max(length(r)) FROM repeat(repeat('x', 600000000), 4) AS t(r))"],
    "postgres": ["repeat('x', 600000000)", "lpad('x', 600000000, 'y')"],
}  # fmt: skip
"""Values of hundreds of MB built by the engine (constant-folded, per row, at bind time)."""
PEAK_GROWTH_MB = 100
TOO_BIG = re.compile(r"memory|too big|too large", re.IGNORECASE)
"""What an error for a value the engine would not build must say."""


def huge_statements(b: Backend) -> list[str]:
    """Every huge-value statement of the dialect on SQLite, DuckDB and PostgreSQL; the first
    (constant-folded) one on the other DuckDB-backed sessions, which share DuckDB's engine."""
    values = HUGE[b.dialect]
    return values if b.spec in {"sqlite", "duckdb", "postgres", MULTI} else values[:1]


def assert_capped_or_refused(big: str, text: str, evidence: Any) -> None:
    """The tool's text and the evidence each: cells cut and said so, or an error naming memory
    or the value limit (the engine's child may run out on one path and not the other)."""
    if text.startswith("ERROR ("):
        assert TOO_BIG.search(text), text
    elif big.startswith("printf"):  # SQLite's printf gives NULL past the length limit
        assert text == "big\tid\nNULL\t0\nNULL\t1\nNULL\t2\nNULL\t3\n[4 row(s)]"
    else:
        assert "[truncated: 4 cell(s) longer than" in text, text[:300]
    if evidence.error is not None:
        assert TOO_BIG.search(evidence.error), evidence.error
        assert not evidence.ran
    assert not evidence.ok


def reset_peak() -> float:
    """Reset this process's peak resident set (`VmHWM`) to its current one; return it in MB."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    return peak_mb()


def peak_mb() -> float:
    """The peak resident set of this process since the last `reset_peak`, in MB."""
    with open("/proc/self/status") as fh:
        line = next(x for x in fh if x.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def test_huge_values_come_back_capped_or_refused_and_the_peak_stays_bounded(
    backend: Backend,
) -> None:
    """The harness's peak memory (not only what it keeps) grows by less than 100 MB while the
    engine is asked for 0.3-4.8 GB values: each comes back cut or as a recorded error."""
    through_tool(backend.item, ["SELECT 1 AS n"])  # warm up: the agent's imports and caches
    growth: dict[str, tuple[float, float]] = {}
    for big in huge_statements(backend):
        sql = f"SELECT {big} AS big, id FROM {backend.orders} LIMIT 4"
        start = reset_peak()
        (text,) = through_tool(backend.item, [sql])
        tool = peak_mb() - start
        start = reset_peak()
        (evidence,) = through_evidence(backend.item, [sql])
        growth[big] = (tool, peak_mb() - start)
        assert len(text.encode()) < TOOL_RESULT_BYTES + 1000
        assert_capped_or_refused(big, text, evidence)
        assert not evidence.ok
        # the session is usable afterwards
        assert through_tool(backend.item, [f"SELECT count(*) AS n FROM {backend.orders}"]) == [
            f"n\n{N_ORDERS}\n[1 row(s)]"
        ]
    print(f"\npeak growth on {backend.spec} (tool, evidence) MB:",
          {k[:40]: (round(a), round(b)) for k, (a, b) in growth.items()})  # fmt: skip
    assert all(max(g) < PEAK_GROWTH_MB for g in growth.values()), growth


def test_wide_and_long_results_are_cut_by_bytes(backend: Backend) -> None:
    """Many rows of long text: the result stops at the byte cap and says so."""
    long = {"sqlite": "printf('%.3000c', 'x')", "duckdb": "repeat('x', 3000)",
            "postgres": "repeat('x', 3000)"}[backend.dialect]  # fmt: skip
    with backend.item.connect() as session:
        result = session.run_sql(
            f"SELECT {long} AS a, {long} AS b FROM {backend.orders}", 200, max_bytes=50_000
        )
    assert result.cut_by_bytes
    assert result.truncated
    assert 0 < len(result.rows) < 200
    assert result.limit_note is not None
    assert "50000-byte cap" in result.limit_note
    assert sum(len(str(v)) for row in result.rows for v in row) <= 50_000 + 2 * 3000


def test_the_wrapping_keeps_what_the_statement_said(backend: Backend) -> None:
    """Trailing semicolons and comments, repeated column names: as without the caps."""
    with backend.item.connect() as session:
        got = session.run_sql(f"SELECT count(*) AS n, 1 AS n FROM {backend.orders};  -- done ;")
        assert (got.columns, got.rows, got.limit_note) == (["n", "n"], [(N_ORDERS, 1)], None)
        text = session.run_sql(f"SELECT '--;' AS s FROM {backend.orders} LIMIT 1 -- c")
        assert text.rows == [("--;",)]


def test_multi_attaches_postgres_as_the_items_select_only_role(tmp_path: Path) -> None:
    import psycopg

    from stores.postgres.store import DEFAULT_DSN

    b = Backend(MULTI, tmp_path)
    try:
        pg: Any = b.item.components["olist_orders"]  # type: ignore[attr-defined]
        (attach,) = [a for a in b.item._attaches if a.kind == "postgres"]  # type: ignore[attr-defined]
        assert f"user={pg.role} " in attach.target
        assert "postgres " not in attach.target.replace(f"user={pg.role}", "")
        with psycopg.connect(DEFAULT_DSN, autocommit=True) as admin:
            row = admin.execute(
                "SELECT rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = %s",
                (pg.role,),
            ).fetchone()
        assert row == (False, False, False)
    finally:
        b.close()
