"""The child process that runs a DuckDB session: its memory cap, its death, its restart."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from stores import engine_process
from stores.base import (
    DatasetFiles,
    QueryError,
    QueryResult,
    QueryTimeout,
    StoreSession,
    TableInfo,
)
from stores.duckdb_store import DuckDBStore
from stores.engine_process import IsolatedSession


class Hostile(StoreSession):
    """A session whose statements do what an engine bug or a huge value would do."""

    def list_tables(self) -> list[str]:
        return [str(os.getpid())]

    def describe_table(self, name: str) -> TableInfo:
        raise NotImplementedError

    def run_sql(self, sql: str, max_rows: int = 200, max_bytes: int = 4_000_000) -> QueryResult:
        if sql == "allocate":
            bytearray(4 * 1024**3)
        if sql == "die":
            os._exit(9)
        if sql == "hang":  # stuck inside the engine: the pipe is never read again
            time.sleep(3600)
        return QueryResult(columns=["n"], rows=[(1,)])

    def close(self) -> None:
        pass


def test_a_child_past_its_memory_cap_is_an_error_not_the_harness_growing() -> None:
    with IsolatedSession(Hostile, where="test", timeout_s=5, memory_bytes=256 * 2**20) as s:
        with pytest.raises(QueryError, match="more memory than the session allows"):
            s.run_sql("allocate")
        assert s.run_sql("SELECT 1").rows == [(1,)]


def test_a_child_that_dies_is_reported_and_replaced() -> None:
    with IsolatedSession(Hostile, where="test", timeout_s=5) as s:
        (first,) = s.list_tables()
        assert int(first) != os.getpid()
        with pytest.raises(QueryError, match="its engine process ended"):
            s.run_sql("die")
        (second,) = s.list_tables()
        assert second != first


def _hanging_open() -> StoreSession:
    """An engine that never finishes opening (as a child forked while another thread held one
    of DuckDB's locks does)."""
    time.sleep(3600)
    raise AssertionError("unreachable")


def _within(seconds: float, call: Callable[[], object]) -> BaseException | None:
    """Run `call` in a thread; what it raised, or a failure if it is still running."""
    raised: list[BaseException | None] = [None]

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # handed back to the test
            raised[0] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still waiting for a stuck engine after {seconds} s"
    return raised[0]


def test_a_child_stuck_in_a_statement_is_killed_at_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(engine_process, "_GRACE_S", 0.2)
    session = IsolatedSession(Hostile, where="test", timeout_s=0.5)  # closed only if unstuck
    raised = _within(30, lambda: session.run_sql("hang"))
    assert isinstance(raised, QueryTimeout), raised
    assert "within the 0.5s limit" in str(raised)
    assert session.run_sql("SELECT 1").rows == [(1,)]  # a fresh child serves the next one
    session.close()


def test_a_child_stuck_opening_its_session_is_killed_at_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(engine_process, "_GRACE_S", 0.2)
    raised = _within(30, lambda: IsolatedSession(_hanging_open, where="test", timeout_s=0.5))
    assert isinstance(raised, QueryTimeout), raised
    assert "opening the session did not finish" in str(raised)


def test_a_duckdb_item_connects_through_a_child(tmp_path: Path) -> None:
    folder = tmp_path / "parquet"
    folder.mkdir()
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": pa.array([1, 2, 3], pa.int64())}), folder / "t.parquet")
    store = DuckDBStore(tmp_path / "work", statement_timeout_s=30)
    store.setup_session()
    item = store.provision(DatasetFiles("d", folder))
    try:
        with item.connect() as session:
            assert isinstance(session, IsolatedSession)
            assert session.run_sql("SELECT sum(id) AS n FROM t").rows == [(6,)]
            assert session.tables_read("SELECT * FROM t") == {"t"}
            assert session.list_tables() == ["t"]
            with pytest.raises(QueryError, match="Out of Memory"):
                session.run_sql("SELECT * FROM repeat(repeat('x', 600000000), 4)")
            assert session.describe_table("t").row_count == 3
    finally:
        item.teardown()
        store.teardown_session()


def test_a_duckdb_session_imports_no_pandas(tmp_path: Path) -> None:
    """Every engine child starts from the harness's modules; one that imported pandas (DuckDB's
    Python module does when a statement binds a parameter) would pay ~0.6 s per connection."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "parquet").mkdir()
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64())}), tmp_path / "parquet/t.parquet")
    script = f"""
import sys
from pathlib import Path
from stores.base import DatasetFiles
from stores.duckdb_store import DuckDBStore
folder = Path({str(tmp_path)!r}) / "parquet"
store = DuckDBStore(Path({str(tmp_path)!r}) / "work", statement_timeout_s=30)
store.setup_session()
item = store.provision(DatasetFiles("d", folder))
session = item.local_session()
session.list_tables(), session.describe_table("t"), session.tables_read("SELECT * FROM t")
session.run_sql("SELECT sum(id) FROM t")
session.close()
item.teardown()
print(sorted(m for m in ("pandas", "numpy") if m in sys.modules))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
