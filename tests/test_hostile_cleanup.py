"""A run killed with SIGKILL mid-item leaves its store copy, sandbox folder, cgroup (and, on
PostgreSQL, database and role) behind; the next run's start removes them, and only them.
`backintel clean` does the same on demand."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_backintel.cli.commands import main
from pytest_backintel.run.cleanup import clean_stale, clean_stale_in_background
from pytest_backintel.sandbox.cgroup import RunCgroup
from stores.common.faults import FAULT_ENV
from stores.owner import OWNER_FILE, Owner, mark_folder
from stores.postgres.store import DEFAULT_DSN

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "definitions" / "level1" / "l1-delivered-orders.scenario.yaml"
CGROUPS = [Path("/sys/fs/cgroup/backintel"), Path("/sys/fs/cgroup/pids/backintel")]

HANG = """
import json, os
from pathlib import Path


class Hang:
    name = "hang"
    kind = "custom"

    def answer(self, task):
        Path(os.environ["HANG_READY"]).write_text(json.dumps(
            {"pid": os.getpid(), "store": task.store_label}))
        if task.run_python is None:  # no sandbox for this store: hang here
            import time
            time.sleep(600)
        task.run_python("import time; time.sleep(600)")
        raise RuntimeError("never reached")


def factory(config):
    return Hang()
"""


def pytest_run(tmp: Path, *args: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "pytest", str(SCENARIO), "-p", "no:xdist", "-q",
           "-p", "no:cacheprovider", "--results-dir", str(tmp / "results"), *args]  # fmt: skip
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def leftovers(data: Path, pid: int) -> dict[str, list[str]]:
    found = {
        "stores": sorted(str(p) for p in data.glob(f"stores/*/{pid}/**/bi_*")),
        "sandbox": sorted(str(p) for p in data.glob(f"sandbox/{pid}/*/ws-*")),
        "cgroups": sorted(str(p) for root in CGROUPS for p in root.glob(f"{pid}-*")),
    }
    return found


def own_folders(data: Path, pid: int) -> list[Path]:
    """The per-process store and sandbox folders of `pid`."""
    return sorted([*data.glob(f"stores/*/{pid}"), *data.glob(f"sandbox/{pid}")])


def test_a_graceful_stop_removes_its_folders(tmp_path: Path, data: Path) -> None:
    (tmp_path / "hang_analyst.py").write_text(HANG)
    ready = tmp_path / "ready.json"
    env = os.environ | {"BACKINTEL_DATA_DIR": str(data), "HANG_READY": str(ready),
                        "PYTHONPATH": str(tmp_path)}  # fmt: skip
    run = pytest_run(tmp_path, "--analyst", "hang_analyst:factory", "--store", "sqlite", env=env)
    try:
        deadline = time.monotonic() + 300
        while not (ready.exists() and leftovers(data, run.pid)["sandbox"]):
            assert run.poll() is None, run.stdout.read().decode() if run.stdout else ""
            assert time.monotonic() < deadline, "the run never reached the sandbox"
            time.sleep(0.2)
        assert own_folders(data, run.pid) != []  # control: the run made them
        run.send_signal(signal.SIGINT)
        out = run.communicate(timeout=120)[0].decode()
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode != 0, out
    assert own_folders(data, run.pid) == [], out


def databases(store_id: str) -> list[str]:
    import psycopg

    with psycopg.connect(DEFAULT_DSN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT datname FROM pg_database WHERE datname = %s UNION ALL "
            "SELECT rolname FROM pg_roles WHERE rolname = %s",
            (store_id, f"{store_id}_ro"),
        ).fetchall()
    return sorted(str(r[0]) for r in rows)


@pytest.fixture
def data() -> Iterator[Path]:
    """A data folder the sandbox's user can reach (pytest's tmp_path is 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="backintel-clean-test-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_next_run_removes_what_a_killed_run_left(
    tmp_path: Path, data: Path, store: str, request: pytest.FixtureRequest
) -> None:
    (tmp_path / "hang_analyst.py").write_text(HANG)
    ready = tmp_path / "ready.json"
    env = os.environ | {"BACKINTEL_DATA_DIR": str(data), "HANG_READY": str(ready),
                        "PYTHONPATH": str(tmp_path)}  # fmt: skip
    first = pytest_run(tmp_path, "--analyst", "hang_analyst:factory", "--store", store, env=env)
    request.addfinalizer(lambda: first.poll() is None and first.kill())  # a failed check
    deadline = time.monotonic() + 300
    while not ready.exists():
        assert first.poll() is None, first.stdout.read().decode() if first.stdout else ""
        assert time.monotonic() < deadline, "the first run never reached the analyst"
        time.sleep(0.2)
    info = json.loads(ready.read_text())
    sandboxed = ("sandbox", "cgroups") if store == "sqlite" else ()
    while not all(leftovers(data, info["pid"])[k] for k in sandboxed):
        assert first.poll() is None, first.stdout.read().decode() if first.stdout else ""
        assert time.monotonic() < deadline, "the sandbox payload never started"
        time.sleep(0.1)
    time.sleep(0.5)  # mid-item: the payload sleeps inside its cgroup
    store_id = info["store"].split(":", 1)[1]
    os.kill(info["pid"], signal.SIGKILL)
    first.wait(30)
    left = leftovers(data, info["pid"])
    if store == "sqlite":  # the copy, the sandbox workspace, the payload's cgroup
        assert all(left.values()), left
    else:  # no sandbox for a server store; its database and role are left on the server
        assert databases(store_id) == sorted([store_id, f"{store_id}_ro"])

    # a live owner's folder on the same machine must survive the sweep
    live = data / "stores" / "sqlite" / str(os.getpid())
    mark_folder(live)
    second = pytest_run(tmp_path, "--store", "sqlite", env=env)
    out = second.communicate(timeout=600)[0].decode()
    assert second.returncode == 0, out
    assert leftovers(data, info["pid"]) == {"stores": [], "sandbox": [], "cgroups": []}
    assert own_folders(data, second.pid) == []  # a clean exit removes its own
    assert not (data / "stores" / store / str(info["pid"])).exists()
    assert live.is_dir()
    if store == "postgres":
        assert databases(store_id) == []


def test_backintel_clean_removes_only_gone_owners(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead_pid = int(dead.stdout)
    gone = data / "stores" / "sqlite" / str(dead_pid)
    gone.mkdir(parents=True)
    (gone / "bi_0123456789ab.sqlite").write_bytes(b"x")
    reused = data / "stores" / "duckdb" / str(child.pid)  # a live pid, but another start time
    reused.mkdir(parents=True)
    me = Owner.current()
    (reused / OWNER_FILE).write_text(json.dumps(
        {"host": me.host, "boot": me.boot, "pid": child.pid, "start": 1}))  # fmt: skip
    alive = data / "sandbox" / str(child.pid)
    alive.mkdir(parents=True)
    outside = tmp_path / "interpreter"
    outside.write_text("#!/bin/sh\n")
    outside.chmod(0o755)
    shipped = data / "sandbox" / str(dead_pid) / "backintel-sbx-x" / "shipped" / "bin"
    shipped.mkdir(parents=True)
    (shipped / "python").symlink_to(outside)
    (shipped.parent / "etc").symlink_to(tmp_path)
    elsewhere = data / "sandbox" / str(dead_pid + 1_000_000) / "backintel-sbx-y"
    elsewhere.mkdir(parents=True)  # named by a pid that is not running here, owned elsewhere
    (elsewhere / OWNER_FILE).write_text(json.dumps(
        {"host": "elsewhere", "boot": "", "pid": 5, "start": None}))  # fmt: skip
    base = RunCgroup.base()
    assert base is not None, "the hostile suite needs a writable pids cgroup hierarchy"
    (base / "backintel").mkdir(exist_ok=True)
    stale_group = base / "backintel" / f"{dead_pid}-cleantest"
    live_group = base / "backintel" / f"{child.pid}-cleantest"
    stale_group.mkdir()
    live_group.mkdir()
    other_host = data / "stores" / "postgres" / "1"
    other_host.mkdir(parents=True)
    (other_host / OWNER_FILE).write_text(json.dumps(
        {"host": "elsewhere", "boot": "", "pid": 999999, "start": None}))  # fmt: skip
    try:
        assert main(["clean", "--data-dir", str(data), "--dry-run", "--no-postgres"]) == 0
        assert gone.exists()
        assert f"would have removed folder {gone}" in capsys.readouterr().out
        assert main(["clean", "--data-dir", str(data), "--no-postgres"]) == 0
        out = capsys.readouterr().out
        assert live_group.is_dir()  # its owner is running
    finally:
        child.kill()
        with contextlib.suppress(OSError):
            live_group.rmdir()
    # Gone: removed by this clean, or first by another xdist worker's session start, which
    # sweeps the same stale cgroups with the same code (`RunCgroup.sweep_stale`).
    assert not stale_group.exists()
    assert f"removed cgroup {live_group}" not in out
    assert not gone.exists()
    assert not shipped.exists()
    assert outside.stat().st_mode & 0o777 == 0o755  # a link's target is never touched
    assert outside.exists()
    assert not reused.exists()
    assert alive.is_dir()
    assert other_host.is_dir()
    assert elsewhere.is_dir()
    assert f"removed folder {gone}" in out
    assert clean_stale(data, postgres=False).folders == []


def test_a_stale_folder_another_session_removed_first_is_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sessions starting side by side (shards on one machine) sweep the same stale folder:
    the one that lists it after the other removed it goes on (this crashed a shard at start)."""
    from pytest_backintel.run import cleanup

    gone = tmp_path / "stores" / "sqlite" / "999999"
    monkeypatch.setattr(cleanup, "stale_folders", lambda data_dir: [gone])
    report = clean_stale(tmp_path, postgres=False)
    assert report.folders == [gone]
    assert not gone.exists()


KILLED_AFTER_CREATE = """
import sys
from pathlib import Path
import pyarrow as pa, pyarrow.parquet as pq
from stores.base import DatasetFiles
from stores.postgres.store import PostgresStore

root = Path(sys.argv[1])
(root / "parquet").mkdir(parents=True)
pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), root / "parquet" / "orders.parquet")
store = PostgresStore(root / "work")
store.setup_session()
print(store.owner_role, flush=True)
store.provision(DatasetFiles("kill", root / "parquet"))
print("survived", flush=True)
"""


def marks(owner_role: str) -> list[tuple[str, str | None]]:
    """The databases the role owns (with their comment), and the role itself."""
    import psycopg

    with psycopg.connect(DEFAULT_DSN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT d.datname, shobj_description(d.oid, 'pg_database') FROM pg_database d "
            "JOIN pg_roles r ON r.oid = d.datdba WHERE r.rolname = %s "
            "UNION ALL SELECT rolname, 'role' FROM pg_roles WHERE rolname = %s",
            (owner_role, owner_role),
        ).fetchall()
    return sorted((str(n), c) for n, c in rows)


def test_a_kill_between_creating_and_marking_a_database_leaves_nothing_clean_misses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = os.environ | {FAULT_ENV: "postgres-database-created"}
    child = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_CREATE, str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr
    owner_role = child.stdout.split()[0]
    assert "survived" not in child.stdout
    found = marks(owner_role)
    assert (owner_role, "role") in found
    ((database, comment),) = [f for f in found if f[1] != "role"]
    assert comment is None  # killed before COMMENT ON DATABASE: only its owner role marks it
    assert re.fullmatch(r"bi_[0-9a-f]{12}", database)
    assert main(["clean", "--data-dir", str(tmp_path / "data")]) == 0
    out = capsys.readouterr().out
    assert marks(owner_role) == []
    assert database in out
    assert owner_role in out
    # control: without the fault the same program provisions and lives on
    ok = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_CREATE + "store.teardown_session()\n",
         str(tmp_path / "ok")], capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == [ok.stdout.split()[0], "survived"]
    assert marks(ok.stdout.split()[0]) == []  # the graceful end removed its own


def test_the_background_sweep_waits_for_its_gate_and_runs_at_once_without_one(
    tmp_path: Path,
) -> None:
    """A session whose process sends model requests lets its PostgreSQL sweep (psycopg's
    import, a round trip) wait for the first request; without a gate it starts at once."""
    gate = threading.Event()
    gated = clean_stale_in_background(tmp_path / "data", gate.wait)
    gated.join(timeout=1.0)
    assert gated.is_alive(), "the sweep began before its gate opened"
    gate.set()
    gated.join(timeout=60)
    assert not gated.is_alive()
    ungated = clean_stale_in_background(tmp_path / "data")
    ungated.join(timeout=60)
    assert not ungated.is_alive()
