"""The controller of a `--store postgres` run with xdist workers is killed with SIGKILL while
its items hold databases; the workers die with it (`run.worker_death`), leaving what they
made to owners that are gone, and the next run's start removes every `bi_` database and role
the killed run's processes made. (Without it, the workers went on for seconds and were then
interrupted part-way through their own teardown, and a run started meanwhile kept their
objects, owned by processes still alive.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_hostile_cleanup import HANG, ROOT, SCENARIO

from stores.owner import Owner
from stores.postgres.store import DEFAULT_DSN

OTHER = SCENARIO.parent / "l1-canceled-orders-2018.scenario.yaml"


def _children(pid: int) -> set[int]:
    """Every descendant of `pid` (by /proc's parent links)."""
    parents: dict[int, int] = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        ppid = next(int(ln.split()[1]) for ln in text.splitlines() if ln.startswith("PPid:"))
        parents[int(status.parent.name)] = ppid
    found, frontier = set(), {pid}
    while frontier:
        frontier = {c for c, p in parents.items() if p in frontier} - found
        found |= frontier
    return found


def _ours(pids: set[int]) -> list[str]:
    """The `bi_` databases and roles whose owner comment names one of `pids` on this host."""
    import psycopg

    with psycopg.connect(DEFAULT_DSN, autocommit=True, connect_timeout=5) as conn:
        rows = conn.execute(
            "SELECT datname, shobj_description(oid, 'pg_database') FROM pg_database "
            "WHERE datname LIKE 'bi\\_%' UNION ALL SELECT rolname, "
            "shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname LIKE 'bi\\_%'"
        ).fetchall()
    me = Owner.current()
    return sorted(
        str(name)
        for name, comment in rows
        if (o := Owner.from_comment(comment)) is not None and o.host == me.host and o.pid in pids
    )


def test_next_run_start_removes_what_a_killed_controllers_workers_left(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    data = tmp_path / "data"
    (tmp_path / "hang_analyst.py").write_text(HANG)
    ready = tmp_path / "ready.json"
    env = os.environ | {"BACKINTEL_DATA_DIR": str(data), "HANG_READY": str(ready),
                        "PYTHONPATH": str(tmp_path)}  # fmt: skip
    cmd = [sys.executable, "-m", "pytest", str(SCENARIO), str(OTHER), "-n", "2", "-q",
           "-p", "no:cacheprovider", "--results-dir", str(tmp_path / "results"),
           "--analyst", "hang_analyst:factory", "--store", "postgres"]  # fmt: skip
    first = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not ready.exists():
            assert first.poll() is None, "the first run ended"
            assert time.monotonic() < deadline, "the first run never reached the analyst"
            time.sleep(0.2)
        pids = _children(first.pid) | {first.pid}
        while len(made := _ours(pids)) < 4:  # both workers: a database and a role each
            assert time.monotonic() < deadline, f"only {made} were made"
            time.sleep(0.2)
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait(30)
    deadline = time.monotonic() + 60
    while any(Path(f"/proc/{p}").exists() for p in pids):  # the workers die with it
        assert time.monotonic() < deadline, "a worker outlived its controller"
        time.sleep(0.1)
    made = _ours(pids)
    assert len(made) >= 4, made  # killed mid-item: databases and roles stay, owners gone
    assert any(n.endswith("_ro") for n in made), made

    second = subprocess.run(
        [sys.executable, "-m", "pytest", str(SCENARIO), "-p", "no:xdist", "-q",
         "-p", "no:cacheprovider", "--results-dir", str(tmp_path / "results"),
         "--store", "postgres"],
        cwd=ROOT, env=os.environ | {"BACKINTEL_DATA_DIR": str(data)}, capture_output=True,
        text=True, check=False, timeout=600,
    )  # fmt: skip
    assert second.returncode == 0, second.stdout[-6000:]
    assert _ours(pids) == [], f"left by the killed run: {_ours(pids)} (made {made})"
    assert not any(Path(f"/proc/{p}").exists() for p in pids)
    assert json.loads(ready.read_text())["store"].startswith("postgres:")
