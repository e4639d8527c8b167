"""Escape and abuse tests against the real bwrap backend (none are skipped on Linux CI).

Every "cannot" check has a control: the same probe run by the unsafe subprocess backend (or the
host) succeeds, so a probe that could never succeed would be noticed.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_backintel.sandbox import Limits
from pytest_backintel.sandbox.bwrap import BwrapProvider
from pytest_backintel.sandbox.subprocess_backend import SubprocessProvider

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

TEST_LIMITS = Limits(
    wall_time_s=2,
    cpu_time_s=1,
    memory_mb=256,
    max_processes=32,
    max_file_size_mb=4,
    max_output_bytes=4096,
    output_kill_bytes=1 << 20,
)


def _make_store(path: Path) -> Path:
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE t (x INTEGER)")
        con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(50)])
    con.close()
    return path


def _expected_home_listing() -> list[str]:
    """Inside, the host home shows at most the folder that leads to the Python installation."""
    prefix = Path(sys.base_prefix)
    if prefix.is_relative_to(Path.home()):
        return [prefix.relative_to(Path.home()).parts[0]]
    return []


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def bwrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BwrapProvider]:
    with BwrapProvider(tmp_path_factory.mktemp("bwrap"), limits=TEST_LIMITS) as provider:
        yield provider


@pytest.fixture(scope="module")
def unsafe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SubprocessProvider]:
    with SubprocessProvider(tmp_path_factory.mktemp("sub"), limits=TEST_LIMITS) as provider:
        yield provider


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """This item's store and another item's store."""
    root = tmp_path_factory.mktemp("stores")
    (root / "a").mkdir()
    (root / "b").mkdir()
    return _make_store(root / "a" / "bi_aaaaaaaaaaaa.sqlite"), _make_store(
        root / "b" / "bi_bbbbbbbbbbbb.sqlite"
    )


# -- network ----------------------------------------------------------------------------------

CONNECT_PG = (
    "import socket\n"
    "try:\n"
    "    socket.create_connection(('127.0.0.1', 5432), timeout=1).close(); print('connected')\n"
    "except OSError as e:\n"
    "    print('refused', e.errno)\n"
)


def test_network_connect_to_local_postgres_fails(
    bwrap: BwrapProvider, unsafe: SubprocessProvider, tmp_path: Path
) -> None:
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=1).close()
    except OSError:
        pytest.fail("control: nothing listens on 127.0.0.1:5432 on this host (start PostgreSQL)")
    with unsafe.open(None, tmp_path) as control:
        assert control.exec(CONNECT_PG).stdout == "connected\n"
    with bwrap.open(None, tmp_path) as sandbox:
        result = sandbox.exec(CONNECT_PG)
        interfaces = sandbox.exec(
            "import socket; print(sorted(n for _, n in socket.if_nameindex()))"
        )
    assert result.stdout.startswith("refused")
    assert interfaces.stdout == "['lo']\n"


def test_dns_fails(bwrap: BwrapProvider, tmp_path: Path) -> None:
    code = (
        "import socket\n"
        "for host in ('pypi.org', 'localhost.localdomain.invalid'):\n"
        "    try:\n"
        "        print(socket.getaddrinfo(host, 443))\n"
        "    except socket.gaierror as e:\n"
        "        print('gaierror')\n"
    )
    with bwrap.open(None, tmp_path) as sandbox:
        assert sandbox.exec(code).stdout == "gaierror\ngaierror\n"
        assert "nameserver" not in sandbox.exec(["cat", "/etc/resolv.conf"]).stdout


# -- file system ------------------------------------------------------------------------------

PROBE = (
    "import json, os, sys\n"
    "out = {}\n"
    "for p in sys.argv[1:]:\n"
    "    try:\n"
    "        out[p] = 'listed' if os.path.isdir(p) and os.listdir(p) else open(p,'rb').read(1)"
    " and 'read'\n"
    "    except OSError as e:\n"
    "        out[p] = type(e).__name__\n"
    "print(json.dumps(out))\n"
)


def test_host_paths_are_invisible(
    bwrap: BwrapProvider,
    unsafe: SubprocessProvider,
    stores: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    mine, other = stores
    secret_dir = tmp_path / "data"
    secret_dir.mkdir()
    (secret_dir / "reference.json").write_text('{"answer": 42}')
    targets = [
        str(REPO),
        str(REPO / "pyproject.toml"),
        str(SHARED),
        str(secret_dir / "reference.json"),
        "/etc/shadow",
        str(other),
        str(other.parent),
        str(bwrap.session_dir),
    ]
    argv = ["python", "-c", PROBE, *targets]
    with unsafe.open(mine, tmp_path) as control:
        seen = json.loads(control.exec(argv).stdout)
    assert seen[str(REPO / "pyproject.toml")] == "read"
    assert seen[str(other)] == "read"
    assert seen[str(secret_dir / "reference.json")] == "read"
    with bwrap.open(mine, tmp_path) as sandbox:
        inside = json.loads(sandbox.exec(argv).stdout)
        ls_root = sandbox.exec(["ls", "/"]).stdout.split()
        usr_local = sandbox.exec(["ls", "-A", "/usr/local"]).stdout
        home = sandbox.exec(["ls", "-A", str(Path.home())]).stdout.split()
    for target in targets:
        assert inside[target] in {"FileNotFoundError", "PermissionError"}, (target, inside)
    assert sorted(ls_root) == sorted(
        {"bin", "data", "dev", "etc", "lib", "lib64", "opt", "proc", "root", "sbin", "tmp"}
        | {"usr", "workspace"} & set(ls_root)
        | ({"root"} if "root" in ls_root else set())
    )
    assert "work" not in ls_root
    assert home == _expected_home_listing(), home
    assert usr_local == ""


def test_only_the_items_store_is_mounted_read_only(
    bwrap: BwrapProvider, stores: tuple[Path, Path], tmp_path: Path
) -> None:
    mine, _ = stores
    before = _sha(mine)
    attacks = (
        "import os, sqlite3, json\n"
        "p = os.environ['BACKINTEL_STORE']\n"
        "out = {'store': p, 'listing': os.listdir('/data/store')}\n"
        "for name, act in [\n"
        "    ('append', lambda: open(p, 'ab').write(b'x')),\n"
        "    ('truncate', lambda: open(p, 'wb')),\n"
        "    ('unlink', lambda: os.unlink(p)),\n"
        "    ('chmod', lambda: os.chmod(p, 0o777)),\n"
        "    ('sibling', lambda: open('/data/store/new.db', 'w')),\n"
        "    ('sql', lambda: sqlite3.connect(p).execute('DELETE FROM t').connection.commit()),\n"
        "]:\n"
        "    try:\n"
        "        act(); out[name] = 'done'\n"
        "    except Exception as e:\n"
        "        out[name] = type(e).__name__\n"
        "print(json.dumps(out))\n"
    )
    with bwrap.open(mine, tmp_path) as sandbox:
        result = json.loads(sandbox.exec(attacks).stdout)
    assert result.pop("store") == f"/data/store/{mine.name}"
    assert result.pop("listing") == [mine.name]
    assert "done" not in result.values(), result
    assert _sha(mine) == before


def test_two_sandboxes_never_share_a_workspace(bwrap: BwrapProvider, tmp_path: Path) -> None:
    a, b = bwrap.open(None, tmp_path), bwrap.open(None, tmp_path)
    try:
        assert a.workspace != b.workspace
        assert a.exec("open('mine.txt', 'w').write('a')").ok
        assert b.exec("import os; print(os.listdir('.'))").stdout == "[]\n"
        probe = b.exec(["python", "-c", PROBE, str(a.workspace), str(a.workspace / "mine.txt")])
        assert set(json.loads(probe.stdout).values()) == {"FileNotFoundError"}
    finally:
        a.close()
        b.close()


def test_proc_shows_only_the_sandbox(bwrap: BwrapProvider, tmp_path: Path) -> None:
    code = (
        "import os\n"
        "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "print(len(pids), os.getuid(), os.path.exists(f'/proc/{sys_pid}'))\n"
    ).replace("{sys_pid}", str(os.getpid()))
    with bwrap.open(None, tmp_path) as sandbox:
        count, uid, sees_host = sandbox.exec(code).stdout.split()
    assert int(count) <= 4  # bwrap's init, the launcher, the payload
    assert uid == "65534"
    assert sees_host == "False"  # the test process's own pid is not there


# -- resource abuse ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "limit"),
    [
        ("import os\nwhile True:\n    os.fork()", "processes"),
        (
            "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
            "        pass",
            "processes",
        ),
        ("x = []\nwhile True:\n    x.append(bytearray(10**7))", "memory"),
        ("import numpy as np\nx = np.ones((1 << 30,), dtype=np.uint8)", "memory"),
        ("while True:\n    pass", "cpu_time"),
        ("import time\ntime.sleep(60)", "wall_time"),
        (
            "import sys\nc = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(c)",
            "output",
        ),
        ("open('big.bin', 'wb').write(b'x' * (8 << 20))", "file_size"),
    ],
    ids=[
        "fork-bomb",
        "fork-bomb-retrying",
        "memory-bomb",
        "numpy-1gb",
        "infinite-loop",
        "sleep",
        "print-1gb",
        "file-8mb",
    ],
)
def test_abuse_is_stopped_and_reported(
    bwrap: BwrapProvider, tmp_path: Path, code: str, limit: str
) -> None:
    # One CPU second can take more than the 2 s wall limit on a loaded 2-core machine.
    wall = 8.0 if limit == "cpu_time" else TEST_LIMITS.wall_time_s
    with bwrap.open(None, tmp_path) as sandbox:
        start = time.monotonic()
        result = sandbox.exec(code, timeout=wall)
        elapsed = time.monotonic() - start
    assert result.limit_hit == limit, result
    assert not result.ok
    assert elapsed < wall + 2


def test_within_limits_is_not_reported(bwrap: BwrapProvider, tmp_path: Path) -> None:
    code = (
        "import os, subprocess\n"
        "x = bytearray(50 << 20)\n"
        "open('ok.bin', 'wb').write(b'x' * (1 << 20))\n"
        "procs = [subprocess.Popen(['true']) for _ in range(5)]\n"
        "print(sum(p.wait() for p in procs))\n"
    )
    with bwrap.open(None, tmp_path) as sandbox:
        result = sandbox.exec(code, timeout=8)
    assert result.ok, result
    assert result.stdout == "0\n"


def _host_pids_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("ending", ["exit", "timeout"])
def test_no_process_survives_the_sandbox(bwrap: BwrapProvider, tmp_path: Path, ending: str) -> None:
    marker = f"backintel-marker-{os.getpid()}-{ending}"
    code = (
        "import subprocess, time\n"
        f"subprocess.Popen(['sleep', '300', '{marker}'], start_new_session=True)\n"
        f"subprocess.Popen(['sh', '-c', 'sleep 301 {marker} &'])\n"
        "print('spawned', flush=True)\n"
        + ("time.sleep(1)\n" if ending == "exit" else "time.sleep(60)\n")
    )
    seen_during: list[int] = []

    def watch() -> None:
        for _ in range(40):
            seen_during.extend(_host_pids_with(marker))
            if seen_during:
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    with bwrap.open(None, tmp_path) as sandbox:
        watcher.start()
        result = sandbox.exec(code, timeout=8 if ending == "exit" else 2)
        watcher.join()
    assert result.stdout == "spawned\n"
    assert seen_during, "control: the marker processes were never visible on the host"
    assert result.limit_hit == (None if ending == "exit" else "wall_time")
    assert _host_pids_with(marker) == []


# -- totals for the whole run (issue 28) --------------------------------------------------------

TOTAL_LIMITS = Limits(
    wall_time_s=30,
    cpu_time_s=30,
    memory_mb=1024,
    max_processes=64,
    max_file_size_mb=256,
    disk_mb=512,
)

EIGHT_PROCESSES = (
    "import multiprocessing as mp, time\n"
    "def hold():\n"
    "    x = bytearray(512 << 20)\n"
    "    for i in range(0, len(x), 4096):\n"
    "        x[i] = 1\n"
    "    time.sleep(30)\n"
    "if __name__ == '__main__':\n"
    "    ps = [mp.get_context('fork').Process(target=hold) for _ in range(8)]\n"
    "    [p.start() for p in ps]\n"
    "    [p.join() for p in ps]\n"
    "    print('all held', flush=True)\n"
)
FOUR_FILES = (
    "block = b'x' * (1 << 20)\n"
    "for n in range(4):\n"
    "    with open(f'f{n}.bin', 'wb') as fh:\n"
    "        for _ in range(256):\n"
    "            fh.write(block)\n"
    "print('all written', flush=True)\n"
)


@pytest.fixture(scope="module", params=["bwrap", "subprocess"])
def totals(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BwrapProvider | SubprocessProvider]:
    cls = BwrapProvider if request.param == "bwrap" else SubprocessProvider
    with cls(tmp_path_factory.mktemp(f"totals-{request.param}"), limits=TOTAL_LIMITS) as prov:
        assert prov.cgroup_mode, "this suite needs writable cgroups (it runs as root on CI)"
        yield prov


def test_eight_processes_of_512_mb_stop_at_the_total_memory_limit(
    totals: BwrapProvider | SubprocessProvider, tmp_path: Path
) -> None:
    # Each process stays under the 1024 MB per-process limit; together they hold 4 GB.
    with totals.open(None, tmp_path) as sandbox:
        result = sandbox.exec(EIGHT_PROCESSES)
    assert result.limit_hit == "memory", result
    assert result.limit == "1024 MB of memory (per process and in total)"
    assert "[stopped: memory limit reached (1024 MB of memory" in result.to_text()
    assert "all held" not in result.stdout
    assert result.duration_s < TOTAL_LIMITS.wall_time_s  # stopped at the limit, not the timer


def test_two_processes_of_256_mb_fit_the_total(
    totals: BwrapProvider | SubprocessProvider, tmp_path: Path
) -> None:
    code = EIGHT_PROCESSES.replace("512 << 20", "256 << 20").replace("range(8)", "range(2)")
    code = code.replace("time.sleep(30)", "time.sleep(0.5)")
    with totals.open(None, tmp_path) as sandbox:
        result = sandbox.exec(code)
    assert result.ok, result
    assert result.stdout == "all held\n"


def test_four_files_of_256_mb_stop_at_the_disk_limit(
    totals: BwrapProvider | SubprocessProvider, tmp_path: Path
) -> None:
    with totals.open(None, tmp_path) as sandbox:
        result = sandbox.exec(FOUR_FILES)
        held = sum(p.stat().st_blocks * 512 for p in sandbox.workspace.rglob("*"))
        again = sandbox.exec("import glob, os\nfor f in glob.glob('*.bin'):\n    os.remove(f)\n")
        after = [p.name for p in sandbox.workspace.iterdir() if p.suffix == ".bin"]
    assert result.limit_hit == "disk", result
    assert result.limit == "512 MB of files in the workspace in total"
    assert "all written" not in result.stdout
    if totals.name == "bwrap":  # a tmpfs of the limit: never a byte beyond it, kept up to it
        assert 500 << 20 < held <= 512 << 20, held
    else:  # a watch: at most what a fast disk writes between two checks beyond the limit
        assert 512 << 20 < held < 768 << 20, held
    assert again.ok, again  # the analyst can free the space again
    assert after == []


def test_files_within_the_disk_limit_are_not_reported(
    totals: BwrapProvider | SubprocessProvider, tmp_path: Path
) -> None:
    with totals.open(None, tmp_path) as sandbox:
        result = sandbox.exec(FOUR_FILES.replace("range(256)", "range(64)"))
    assert result.ok, result
    assert result.stdout == "all written\n"


def test_the_tree_is_stopped_at_its_total_cpu_time(bwrap: BwrapProvider, tmp_path: Path) -> None:
    # Four busy processes: each stays under its own 1 CPU second for a while, the tree does not.
    code = (
        "import os, time\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n"
        "        break\n"
        "end = time.monotonic() + 20\n"
        "while time.monotonic() < end:\n"
        "    pass\n"
    )
    with bwrap.open(None, tmp_path) as sandbox:
        result = sandbox.exec(code, timeout=20)
    assert result.limit_hit == "cpu_time", result
    assert result.duration_s < 15


def test_a_flood_of_empty_files_counts_against_the_disk_limit(
    totals: BwrapProvider | SubprocessProvider, tmp_path: Path
) -> None:
    # Each file counts at least one 4 KiB block: 16 MB is 4096 empty files.
    code = "import os\nfor n in range(100_000):\n    open(f'e{n}', 'w').close()\nprint('done')\n"
    with totals.open(None, tmp_path) as sandbox:
        result = sandbox.exec(code, limits=TOTAL_LIMITS.with_(disk_mb=16))
        made = sum(1 for _ in sandbox.workspace.iterdir())
    assert result.limit_hit == "disk", result
    assert "done" not in result.stdout
    if totals.name == "bwrap":  # the copy back keeps one entry per 4 KiB of the limit, no more
        assert 0 < made <= 4096, made
    else:
        assert 4096 < made < 100_000
