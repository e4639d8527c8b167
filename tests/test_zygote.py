"""Python evidence forked from a zygote (issue 39, item 2): each run is as isolated from the
next as a fresh sandbox, limits are recorded as a fresh sandbox records them, and a dead or
wedged zygote is replaced.

Real bwrap sandboxes and cgroups (skipped where this machine has neither). The zygote here
preloads a short list of modules (its start-up is the slow part; what it isolates is the same).
"""

from __future__ import annotations

import gc
import json
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_backintel.evidence.item_python import ItemPython
from pytest_backintel.sandbox import Limits, SandboxUnavailable
from pytest_backintel.sandbox import zygote as zygote_module
from pytest_backintel.sandbox.base import ExecResult
from pytest_backintel.sandbox.bwrap import BwrapProvider
from pytest_backintel.sandbox.evidence import PythonEvidenceValues, run_python_evidence
from pytest_backintel.sandbox.subprocess_backend import SubprocessProvider
from pytest_backintel.sandbox.zygote import ZYGOTE_ENV, forked_run
from stores.base import DatasetFiles
from stores.sqlite.store import SQLiteStore

LIMITS = Limits(
    wall_time_s=6,
    cpu_time_s=1,
    memory_mb=384,
    max_processes=32,
    max_file_size_mb=4,
    disk_mb=8,
    tmp_size_mb=8,
    max_output_bytes=4096,
    output_kill_bytes=1 << 20,
)


@pytest.fixture(scope="module")
def bwrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BwrapProvider]:
    patch = pytest.MonkeyPatch()
    patch.setattr(zygote_module, "PRELOAD", ("json", "backintel_store", "numpy"))
    try:
        with BwrapProvider(tmp_path_factory.mktemp("zygote"), limits=LIMITS) as provider:
            if not provider.cgroup_mode:
                pytest.skip("no writable cgroup here: evidence runs in fresh sandboxes")
            yield provider
    except SandboxUnavailable as exc:
        pytest.skip(str(exc))
    finally:
        patch.undo()


def _store(path: Path, value: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE t (x INTEGER)")
        con.executemany("INSERT INTO t VALUES (?)", [(value,)] * 10)
    con.close()
    return path


def _forked(provider: BwrapProvider, code: str, store: Path | None = None) -> ExecResult:
    result = forked_run(provider, store, code, provider.limits, None)
    assert result is not None, "the zygote did not run the code"
    return result


def _printed(result: ExecResult) -> dict[str, object]:
    assert result.ok, result
    return dict(json.loads(result.stdout.splitlines()[-1]))


LEAVE = """
import ctypes, json, os, subprocess, sys
for folder in ("/tmp", "/workspace", "/dev/shm", "/data/store"):
    with open(os.path.join(folder, "left.txt"), "w") as fh:
        fh.write("secret")
os.mkdir("/tmp/locked"); open("/tmp/locked/f", "w").close(); os.chmod("/tmp/locked", 0)
libc = ctypes.CDLL(None, use_errno=True)
assert libc.shmget(0x5EC2E7, 4096, 0o1666) >= 0
subprocess.Popen(["sleep", "600"], start_new_session=True)
os.environ["LEFT"] = "secret"
os.putenv("LEFT_PUT", "secret")
json.dumps = lambda *a, **k: "patched"
import numpy
numpy.left = "secret"
print(json.loads('{"planted": true}'))
"""

LOOK = """
import ctypes, json, os, sys
import numpy
found = [
    os.path.join(folder, name)
    for folder in ("/tmp", "/workspace", "/dev/shm", "/data/store")
    for name in os.listdir(folder)
]
libc = ctypes.CDLL(None, use_errno=True)
mine = (1, os.getpid(), os.getppid())
others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in mine]
print(json.dumps({
    "files": found,
    "shm": libc.shmget(0x5EC2E7, 0, 0) >= 0,
    "sysvipc": open("/proc/sysvipc/shm").read().splitlines()[1:],
    "processes": others,
    "env": [k for k in os.environ if k.startswith("LEFT")],
    "json_patched": json.dumps([1]) == "patched",
    "numpy_patched": hasattr(numpy, "left"),
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
}))
"""


def test_a_run_sees_nothing_the_previous_run_left(bwrap: BwrapProvider) -> None:
    planted = _forked(bwrap, LEAVE)
    assert planted.ok, planted
    seen = _printed(_forked(bwrap, LOOK))
    assert seen == {
        "files": [],
        "shm": False,
        "sysvipc": [],
        "processes": [],
        "env": [],
        "json_patched": False,
        "numpy_patched": False,
        "fds": [0, 1, 2, 3],  # 3: the listing's own descriptor
    }


def test_a_run_cannot_reach_the_zygote_or_keep_a_keyring(bwrap: BwrapProvider) -> None:
    code = """
import ctypes, json, os
parent = os.getppid()
out = {}
for name in ("mem", "environ", *(f"fd/{fd}" for fd in os.listdir(f"/proc/{parent}/fd"))):
    try:
        os.close(os.open(f"/proc/{parent}/{name}", os.O_RDONLY))
        out[name] = "opened"
    except OSError as exc:
        out[name] = exc.errno
out = {"mem": out.pop("mem"), "environ": out.pop("environ"), "fds": sorted(set(out.values()))}
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out["keyctl"] = libc.syscall(250, 0, -4, 0, 0, 0) >= 0 or ctypes.get_errno()
out["add_key"] = libc.syscall(248, b"user", b"left", b"x", 1, -4) >= 0 or ctypes.get_errno()
print(json.dumps(out))
"""
    seen = _printed(_forked(bwrap, code))
    assert seen == {"mem": 13, "environ": 13, "fds": [13], "keyctl": 38, "add_key": 38}


def test_each_run_reads_only_its_own_store(bwrap: BwrapProvider, tmp_path: Path) -> None:
    """The source and a perturbed copy in turn: each run sees its own data, not the other's."""
    source = _store(tmp_path / "a" / "shop.sqlite", 1)
    copy = _store(tmp_path / "b" / "permuted.sqlite", 2)
    code = (
        "import json, os, backintel_store as bs\n"
        "print(json.dumps({'x': bs.query_rows if False else bs.connect().execute("
        "'SELECT sum(x) FROM t').fetchone()[0], 'store': os.listdir('/data/store'),"
        " 'writable': os.access(bs.store_path(), os.W_OK)}))\n"
    )
    assert _printed(_forked(bwrap, code, source)) == {
        "x": 10,
        "store": ["shop.sqlite"],
        "writable": False,
    }
    assert _printed(_forked(bwrap, code, copy)) == {
        "x": 20,
        "store": ["permuted.sqlite"],
        "writable": False,
    }


def test_the_query_channel_is_the_items_own(bwrap: BwrapProvider, tmp_path: Path) -> None:
    """Evidence re-run through `ItemPython` (the harness's path): `bs.query` reaches this item's
    session over the descriptor it was given; no channel socket of any item is in reach."""
    db = _store(tmp_path / "src" / "shop.sqlite", 3)
    backend = SQLiteStore(tmp_path / "stores")
    item = backend.provision(DatasetFiles("shop", db.parent, sqlite_path=db))
    python = ItemPython(bwrap, None, item.connect)
    code = (
        "import json, os, backintel_store as bs\n"
        "n = bs.query('SELECT sum(x) AS n FROM t')[0]['n']\n"
        "print(json.dumps({'n': n, 'run': os.path.exists('/run/backintel-query'),"
        " 'fds': sorted(os.listdir('/proc/self/fd'))}))\n"
    )
    try:
        printed = python.evidence(code)
    finally:
        python.close()
        item.teardown()
        backend.teardown_session()
    assert printed == {"n": 30, "run": False, "fds": ["0", "1", "2", "3", "4"]}
    assert python.evidence_sql == [["SELECT sum(x) AS n FROM t"]]


def test_the_channel_end_handed_to_a_run_is_closed_once(
    bwrap: BwrapProvider, tmp_path: Path
) -> None:
    """The child's end of its channel is closed right after it is handed over, and nothing
    closes that number again later: a second close would hit whatever descriptor the harness
    opened under it since (seen as `Bad file descriptor` closing another run's channel)."""
    db = _store(tmp_path / "src" / "shop.sqlite", 3)
    backend = SQLiteStore(tmp_path / "stores")
    item = backend.provision(DatasetFiles("shop", db.parent, sqlite_path=db))
    python = ItemPython(bwrap, None, item.connect)
    with warnings.catch_warnings():  # what earlier tests left is not this run's
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            printed = python.evidence(
                "import json, backintel_store as bs\n"
                "print(json.dumps(bs.query('SELECT sum(x) AS n FROM t')[0]))"
            )
            gc.collect()
    finally:
        python.close()
        item.teardown()
        backend.teardown_session()
    assert printed == {"n": 30}
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert [m for m in unclosed if "socket" in m] == []


@pytest.mark.parametrize(
    ("code", "limit"),
    [
        ("import os\nwhile True:\n    os.fork()", "processes"),
        ("x = []\nwhile True:\n    x.append(bytearray(10**7))", "memory"),
        ("while True:\n    pass", "cpu_time"),
        ("import time\ntime.sleep(60)", "wall_time"),
        ("import sys\nc = 'x' * (1 << 20)\nfor _ in range(64):\n    sys.stdout.write(c)", "output"),
        ("open('big.bin', 'wb').write(b'x' * (8 << 20))", "file_size"),
        (
            "for i in range(4):\n    open(f'f{i}.bin', 'wb').write(b'x' * (3 << 20))",
            "disk",
        ),
    ],
    ids=["fork-bomb", "memory-bomb", "infinite-loop", "sleep", "print", "file", "disk"],
)
def test_limits_are_recorded_as_a_fresh_sandbox_records_them(
    bwrap: BwrapProvider, code: str, limit: str
) -> None:
    forked = _forked(bwrap, code)
    with bwrap.open(None) as sandbox:
        fresh = sandbox.exec(code)
    assert (
        (forked.limit_hit, forked.limit)
        == (fresh.limit_hit, fresh.limit)
        == (
            limit,
            LIMITS.describe(limit),  # type: ignore[arg-type]
        )
    )
    assert _printed(_forked(bwrap, "print('{\"after\": 1}')")) == {"after": 1}


def test_a_run_that_kills_the_zygote_is_recorded_and_the_next_gets_a_new_one(
    bwrap: BwrapProvider,
) -> None:
    killed = _forked(bwrap, "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
    assert not killed.ok
    assert "without the launcher's report" in killed.stderr
    assert "the zygote this run was forked from ended first (bwrap exit status 137)" in (
        killed.stderr
    )
    assert _printed(_forked(bwrap, "print('{\"after\": 2}')")) == {"after": 2}


def test_evidence_output_is_the_same_forked_or_fresh(
    bwrap: BwrapProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seeded generators and the program's exit as `python -c` gives them."""
    store = _store(tmp_path / "s" / "shop.sqlite", 4)
    code = (
        "import json, random, numpy as np, backintel_store as bs\n"
        "n = bs.connect().execute('SELECT count(*) FROM t').fetchone()[0]\n"
        "print(json.dumps({'n': n, 'r': random.random(), 'np': float(np.random.rand())}))\n"
    )
    forked = run_python_evidence(bwrap, store, code)
    monkeypatch.setenv(ZYGOTE_ENV, "0")
    assert forked_run(bwrap, store, code, bwrap.limits, None) is None
    fresh = run_python_evidence(bwrap, store, code)
    assert forked.values == fresh.values  # type: ignore[union-attr]
    failing = "import sys\nprint('partial')\nraise SystemExit(3)"
    monkeypatch.delenv(ZYGOTE_ENV)
    crashed = _forked(bwrap, failing)
    assert (crashed.returncode, crashed.stdout) == (3, "partial\n")


def test_other_backends_run_fresh_sandboxes(tmp_path: Path) -> None:
    with SubprocessProvider(tmp_path, limits=LIMITS) as provider:
        assert forked_run(provider, None, "print(1)", LIMITS, None) is None


def test_a_run_that_stops_the_zygote_is_recorded_and_the_next_gets_a_new_one(
    bwrap: BwrapProvider,
) -> None:
    """A wedged zygote never reports the end: the run meets its wall time, as a fresh sandbox's
    run that stops its launcher does, and the zygote is replaced."""
    code = "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)"
    stopped = _forked(bwrap, code)
    assert stopped.limit_hit == "wall_time"
    assert _printed(_forked(bwrap, "print('{\"after\": 3}')")) == {"after": 3}


def test_the_zygote_outlives_the_thread_that_started_it(bwrap: BwrapProvider) -> None:
    """bwrap dies with the thread that forks it (`--die-with-parent` is PR_SET_PDEATHSIG): a
    zygote started by a thread that has ended (`warm`'s, a trial's) serves the next run, which
    used to end -9 without a report when it raced that end (seen under load), or restart it."""
    zygote = zygote_module._zygote(bwrap, LIMITS)
    assert zygote is not None
    with zygote.lock:
        zygote.kill()
    first: list[ExecResult] = []
    starter = threading.Thread(target=lambda: first.append(_forked(bwrap, "print('{}')")))
    starter.start()
    starter.join()
    while Path(f"/proc/self/task/{starter.native_id}").exists():  # gone from the kernel too
        time.sleep(0.01)
    assert len(first) == 1
    assert first[0].ok, first
    assert zygote._proc is not None
    started = zygote._proc.pid
    assert _printed(_forked(bwrap, "print('{\"after\": 4}')")) == {"after": 4}
    assert zygote._proc.pid == started  # the same zygote, not one started again


def test_a_forked_run_killed_by_a_signal_no_limit_explains_is_run_again_fresh(
    bwrap: BwrapProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child that dies by a signal with no limit hit is not trusted as the record: the same
    program runs in a fresh sandbox, whose end (here the same signal) is what is scored."""
    store = _store(tmp_path / "s.sqlite", 1)
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    assert _forked(bwrap, code, store).returncode == -9
    opened: list[object] = []
    real_open = bwrap.open

    def spy(*args: Any, **kwargs: Any) -> Any:
        opened.append(args)
        return real_open(*args, **kwargs)

    monkeypatch.setattr(bwrap, "open", spy)
    done = run_python_evidence(bwrap, store, code)
    assert len(opened) == 1  # the fresh sandbox ran it
    assert done.result.returncode == -9
    good = run_python_evidence(bwrap, store, "print('{\"x\": 1}')")
    assert isinstance(good, PythonEvidenceValues)
    assert good.values == {"x": 1}
    assert len(opened) == 1  # a run that ends well is not run twice
