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

from stores.base import (
    DatasetFiles,
    QueryError,
    QueryResult,
    QueryTimeout,
    StoreSession,
    TableInfo,
)
from stores.duckdb.store import DuckDBStore
from stores.engine import process as engine_process
from stores.engine.process import IsolatedSession


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
from stores.duckdb.store import DuckDBStore
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


def test_a_session_opens_while_another_thread_is_inside_duckdb_on_the_same_file(
    tmp_path: Path,
) -> None:
    """Children come from the fork server, not from the harness: a child forked from the
    harness while another of its threads ran a statement on the same database inherited that
    open database with its lock held and its worker threads gone, and hung or failed opening."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "parquet"
    folder.mkdir()
    pq.write_table(pa.table({"id": pa.array(range(200_000), pa.int64())}), folder / "t.parquet")
    store = DuckDBStore(tmp_path / "work", statement_timeout_s=20)
    store.setup_session()
    item = store.provision(DatasetFiles("d", folder))
    busy = threading.Event()
    stop = threading.Event()

    def churn() -> None:  # the harness's own use of the item (fingerprints, probes)
        while not stop.is_set():
            connection = item.engine_connection()
            busy.set()
            connection.execute("SELECT count(DISTINCT id::VARCHAR || 'x') FROM t").fetchall()
            connection.close()

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        assert busy.wait(30)
        for _ in range(5):
            raised = _within(60, lambda: _one_query(item))
            assert raised is None, raised
    finally:
        stop.set()
        thread.join(60)
        item.teardown()
        store.teardown_session()


def _one_query(item: object) -> None:
    with item.connect() as session:  # type: ignore[attr-defined]
        assert session.run_sql("SELECT count(*) AS n FROM t").rows == [(200_000,)]


def test_a_child_writes_to_the_harness_s_current_stderr_and_has_its_environment(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BACKINTEL_TEST_MARK", "set-after-the-server-started")
    with IsolatedSession(Talker, where="test", timeout_s=5) as s:
        assert s.list_tables() == ["set-after-the-server-started"]
    assert "a word from the engine child" in capfd.readouterr().err


class Talker(Hostile):
    def list_tables(self) -> list[str]:
        print("a word from the engine child", file=sys.stderr, flush=True)
        return [os.environ.get("BACKINTEL_TEST_MARK", "")]


def test_an_opener_that_cannot_go_to_the_child_is_a_store_error() -> None:
    from stores.base import StoreError

    with pytest.raises(StoreError, match="cannot start the engine process of test"):
        IsolatedSession(lambda: Hostile(), where="test", timeout_s=5)


def test_engine_children_and_their_server_end_when_the_harness_is_killed(tmp_path: Path) -> None:
    script = """
import os, sys, time
from stores.engine.process import IsolatedSession
from tests.test_engine_process import Hostile
s = IsolatedSession(Hostile, where="test", timeout_s=5)
print(s.list_tables()[0], flush=True)
time.sleep(3600)
"""
    harness = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=Path.cwd()
    )
    assert harness.stdout is not None
    child = int(harness.stdout.readline())
    server = _parent_of(child)
    assert _parent_of(server) == harness.pid  # the server is the harness's, the child its
    harness.kill()
    harness.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (_running(child) or _running(server)):
        time.sleep(0.1)
    assert not _running(child)
    assert not _running(server)


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_fork_server_has_one_thread_and_runs_no_engine() -> None:
    """Children are forked from a process with one thread: nothing of DuckDB, OpenBLAS or
    Arrow's allocator can be caught mid-work by the fork."""
    from stores.engine import fork_server

    with IsolatedSession(Hostile, where="test", timeout_s=5) as s:
        s.list_tables()  # the server has finished its imports
        server = fork_server.shared(engine_process._PRELOAD)
        assert "duckdb" in _modules_of(server.pid)
        assert len(os.listdir(f"/proc/{server.pid}/task")) == 1


def _modules_of(pid: int) -> str:
    """The shared objects mapped into `pid` (what it has imported)."""
    return Path(f"/proc/{pid}/maps").read_text()
