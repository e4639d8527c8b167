"""The bwrap workspace is a tmpfs of the disk limit (issue 28): a hard bound, whatever the payload
does — write fast, plant links, make sparse files or hard links — and it still persists across
runs like a host folder. Hostile cases; the subprocess backend's watch is in test_sandbox_escape.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_backintel.sandbox import Limits
from pytest_backintel.sandbox.bwrap import BwrapProvider
from pytest_backintel.sandbox.workspace_tmpfs import mirror

LIMITS = Limits(wall_time_s=30, cpu_time_s=30, memory_mb=1024, max_file_size_mb=256, disk_mb=64)
MB = 1 << 20


@pytest.fixture(scope="module")
def bwrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BwrapProvider]:
    with BwrapProvider(tmp_path_factory.mktemp("tmpfs"), limits=LIMITS) as provider:
        yield provider


def _held(folder: Path) -> int:
    """Bytes the host folder holds (allocated blocks; hard links counted once)."""
    seen: set[int] = set()
    total = 0
    for path in folder.rglob("*"):
        st = path.lstat()
        if st.st_ino not in seen:
            seen.add(st.st_ino)
            total += st.st_blocks * 512
    return total


def test_a_fast_writer_never_holds_a_byte_past_the_limit(bwrap: BwrapProvider, tmp_path: Path):
    # 16 MB writes at page-cache speed: the watch it replaces was 2-56 MB over in five runs.
    code = (
        "block = b'x' * (16 << 20)\n"
        "for n in range(8):\n"
        "    with open(f'f{n}.bin', 'wb') as fh:\n"
        "        for _ in range(4):\n"
        "            fh.write(block)\n"
        "print('all written')\n"
    )
    for _ in range(3):
        with bwrap.open(None, tmp_path) as sandbox:
            result = sandbox.exec(code)
            held = _held(sandbox.workspace)
        assert result.limit_hit == "disk", result
        assert result.limit == "64 MB of files in the workspace in total"
        assert "all written" not in result.stdout
        assert 60 * MB < held <= 64 * MB, held


def test_the_workspace_persists_across_runs_and_host_writes(bwrap: BwrapProvider, tmp_path: Path):
    with bwrap.open(None, tmp_path) as sandbox:
        sandbox.write_file("given.txt", "from the host\n")
        first = sandbox.exec(
            "import os\nos.makedirs('d/e')\nopen('d/e/f.txt','w').write('one')\n"
            "print(open('given.txt').read(), end='')\nos.remove('given.txt')\n"
        )
        second = sandbox.exec("print(open('d/e/f.txt').read())\nimport os\nprint(os.listdir())")
        on_host = sandbox.read_file("d/e/f.txt")
        gone = not (sandbox.workspace / "given.txt").exists()
    assert first.ok, first
    assert first.stdout == "from the host\n"
    assert second.ok, second
    assert second.stdout == "one\n['d']\n"
    assert on_host == b"one"
    assert gone  # a deletion inside reaches the host folder


def test_a_full_workspace_can_be_emptied_again(bwrap: BwrapProvider, tmp_path: Path) -> None:
    with bwrap.open(None, tmp_path) as sandbox:
        full = sandbox.exec("open('big', 'wb').write(b'x' * (80 << 20))\n")
        again = sandbox.exec("import os\nos.remove('big')\nopen('small','w').write('ok')\n")
        names = sorted(p.name for p in sandbox.workspace.iterdir())
    assert full.limit_hit == "disk", full
    assert again.ok, again
    assert names == ["small"]


def test_links_planted_inside_never_bring_host_files_in(bwrap: BwrapProvider, tmp_path: Path):
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host only\n")
    code = (
        "import os\n"
        f"os.symlink({str(secret)!r}, 'to_secret')\n"
        "os.symlink('/etc', 'etc_link')\n"
        "os.mkdir('d')\n"
        "os.symlink('/', 'd/root')\n"
    )
    with bwrap.open(None, tmp_path / "ws") as sandbox:
        result = sandbox.exec(code)
        link = sandbox.workspace / "to_secret"
        is_link, points_to = link.is_symlink(), os.readlink(link)
        kinds = {p.name: p.is_symlink() for p in sandbox.workspace.rglob("*") if p.is_symlink()}
        again = sandbox.exec(
            "import os\ntry:\n    print(open('to_secret').read())\n"
            "except OSError as exc:\n    print('refused', exc.errno)\n"
        )
    assert result.ok, result
    assert is_link
    assert points_to == str(secret)  # kept as a link, not content
    assert kinds == {"to_secret": True, "etc_link": True, "root": True}
    assert "host only" not in again.stdout  # inside, the link leads nowhere on the host


def test_hard_links_and_sparse_files_cannot_multiply_the_host_disk(
    bwrap: BwrapProvider, tmp_path: Path
) -> None:
    links = (
        "import os\nopen('one', 'wb').write(b'x' * (8 << 20))\n"
        "for n in range(500):\n    os.link('one', f'l{n}')\nprint('linked')\n"
    )
    sparse = (  # 1 GB of apparent size in five files of 200 MB, holding no block
        "for n in range(5):\n    with open(f'sparse{n}', 'wb') as fh:\n"
        "        fh.truncate(200 << 20)\nprint('made')\n"
    )
    with bwrap.open(None, tmp_path) as sandbox:
        linked = sandbox.exec(links)
        held_links = _held(sandbox.workspace)
        count = sum(1 for _ in sandbox.workspace.iterdir())
        made = sandbox.exec(sparse)
        held_sparse = _held(sandbox.workspace)
        sparse_on_host = [p.name for p in sandbox.workspace.glob("sparse*")]
    assert linked.ok, linked
    assert linked.stdout == "linked\n"
    assert count == 501
    assert held_links < 9 * MB  # 501 names, one file's blocks
    assert made.limit_hit == "disk", made  # 1 GB of apparent size is not copied out whole
    assert len(sparse_on_host) == 0, sparse_on_host  # 56 MB left: not even one 200 MB file
    assert held_sparse < 9 * MB


def test_a_run_stopped_by_its_wall_time_keeps_what_it_wrote(bwrap: BwrapProvider, tmp_path: Path):
    code = "open('partial.txt','w').write('so far')\nimport time\ntime.sleep(60)\n"
    with bwrap.open(None, tmp_path) as sandbox:
        result = sandbox.exec(code, timeout=2)
        kept = sandbox.read_file("partial.txt")
    assert result.limit_hit == "wall_time", result
    assert kept == b"so far"


def test_writable_paths_outside_the_workspace_are_small_tmpfs(
    bwrap: BwrapProvider, tmp_path: Path
) -> None:
    code = (
        "import os\n"
        "for d in ['/tmp', '/dev/shm', '/dev', '/', '/var/tmp', '/.workspace-seed']:\n"
        "    try:\n"
        "        with open(os.path.join(d, 'x'), 'wb') as fh:\n"
        "            fh.write(b'x' * (100 << 20))\n"
        "        print(d, 'wrote all')\n"
        "    except OSError as exc:\n"
        "        print(d, 'refused', exc.errno)\n"
    )
    with bwrap.open(None, tmp_path) as sandbox:
        result = sandbox.exec(code)
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert lines["/tmp"] == "refused 28", result  # 64 MB tmpfs: ENOSPC
    assert lines["/dev/shm"] == "refused 28"
    assert lines["/dev"] == "refused 30"  # read-only
    assert lines["/"] == "refused 30"
    assert lines["/.workspace-seed"] == "refused 30"  # the host folder is read-only inside
    assert lines["/var/tmp"].startswith("refused")


def test_mirror_stops_at_its_budget_and_follows_no_link(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "sub").mkdir(parents=True)
    (src / "a").write_bytes(b"a" * 5000)
    (src / "sub" / "b").write_bytes(b"b" * 5000)
    (src / "outside").symlink_to(tmp_path)
    dst.mkdir()
    (dst / "stale").write_text("removed")
    assert mirror(src, dst, 1 << 20)
    assert sorted(p.name for p in dst.iterdir()) == ["a", "outside", "sub"]
    assert (dst / "outside").is_symlink()
    assert not mirror(src, dst, 6000)  # 10,000 bytes of contents do not fit 6,000
    held = sum(p.stat().st_size for p in dst.rglob("*") if p.is_file() and not p.is_symlink())
    assert held <= 6000


def test_workspace_files_count_against_the_memory_limit(tmp_path: Path) -> None:
    # 400 MB of files against 512 MB of disk but 256 MB of memory: the tmpfs is memory.
    limits = LIMITS.with_(disk_mb=512, memory_mb=256)
    code = (
        "block = b'x' * (1 << 20)\n"
        "for n in range(2):\n"
        "    with open(f'f{n}', 'wb') as fh:\n"
        "        for _ in range(200):\n"
        "            fh.write(block)\n"
        "print('written')\n"
    )
    with BwrapProvider(tmp_path / "p", limits=limits) as provider:
        if not provider.cgroup_mode:
            pytest.skip("needs a writable memory cgroup (root)")
        with provider.open(None, tmp_path) as sandbox:
            result = sandbox.exec(code)
            held = _held(sandbox.workspace)
    assert result.limit_hit == "memory", result
    assert "written" not in result.stdout
    assert held <= 256 * MB  # what fitted is kept


def test_files_the_harness_put_past_the_limit_are_kept_whole(
    bwrap: BwrapProvider, tmp_path: Path
) -> None:
    with bwrap.open(None, tmp_path) as sandbox:
        for n in range(3):  # 96 MB by the harness itself against a 64 MB limit
            sandbox.write_file(f"given{n}.bin", b"g" * (32 * MB))
        listed = sandbox.exec("import os\nprint(sorted(os.listdir()))\nos.remove('given0.bin')")
        names = sorted(p.name for p in sandbox.workspace.iterdir())
    assert listed.ok, listed
    assert listed.stdout == "['given0.bin', 'given1.bin', 'given2.bin']\n"
    assert names == ["given1.bin", "given2.bin"]  # deleting one loses none of the others


def test_a_full_tmp_that_fails_the_payload_is_the_disk_limit(
    bwrap: BwrapProvider, tmp_path: Path
) -> None:
    code = "open('/tmp/big', 'wb').write(b'x' * (100 << 20))\n"
    handled = "try:\n    " + code + "except OSError:\n    print('handled')\n"
    with bwrap.open(None, tmp_path) as sandbox:
        failed = sandbox.exec(code)
        caught = sandbox.exec(handled)
    assert failed.limit_hit == "disk", failed  # ENOSPC out of the 64 MB /tmp
    assert "No space left on device" in failed.stderr
    assert caught.ok, caught  # a handled ENOSPC is no limit hit
    assert caught.stdout == "handled\n"
