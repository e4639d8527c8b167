"""The workspace as a size-limited tmpfs (bwrap): a hard bound on the disk a run fills.

Inside the sandbox `/workspace` is a fresh tmpfs of `Limits.disk_mb`; a write past it fails
with ENOSPC, however fast the payload writes. The workspace still persists across `exec` calls:
the host folder is mounted read-only at `SEED_INSIDE` and the launcher copies it into the tmpfs
before the payload starts; when the run ends (or the host stops it) the host copies the tmpfs
back into its folder through `/proc/<pid>/root` of a process still inside, one directory
descriptor at a time and never following a link, at most `disk_mb` of file contents (files
counted at their full size, so a sparse file cannot make the host hold more; hard links kept as
links) and one entry per 4 KiB of the limit (so a flood of empty files cannot either). A run
the host could not reach any more (every process inside gone, e.g. an out-of-memory kill of the
launcher) keeps the files of earlier runs only.

The tmpfs's pages are memory: they count against the run's memory limit (the cgroup's).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path

__all__ = ["SEED_INSIDE", "TmpfsWorkspace", "mirror", "tmpfs_bytes"]

SEED_INSIDE = "/.workspace-seed"
"""Where the host workspace is mounted read-only inside, for the launcher to copy in."""

_MIN_ENTRY = 4096
_FULL_BELOW = 64 * 1024
"""A tmpfs with less free space than this is full: the payload met the limit."""
_CHUNK = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class _Budget:
    """Bytes of file contents and entries (one per 4 KiB of the limit) still allowed."""

    def __init__(self, limit: int) -> None:
        self.bytes_left = limit
        self.entries_left = max(1, limit // _MIN_ENTRY)
        self.exceeded = False

    def take(self, size: int) -> bool:
        if size > self.bytes_left or self.entries_left <= 0:
            self.exceeded = True
            return False
        self.bytes_left -= size
        self.entries_left -= 1
        return True


def _remove(dst: Path) -> None:
    if dst.is_dir() and not dst.is_symlink():
        shutil.rmtree(dst, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            dst.unlink()


def _copy_file(src_dir: int, name: str, st: os.stat_result, dst: Path) -> None:
    fd = os.open(name, _FILE_FLAGS, dir_fd=src_dir)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped since the listing
            return
        tmp = dst.with_name(f".{dst.name}.backintel-copy")
        _remove(tmp)
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            left = st.st_size
            while left > 0 and (chunk := os.read(fd, min(_CHUNK, left))):
                os.write(out, chunk)
                left -= len(chunk)
        finally:
            os.close(out)
        os.chmod(tmp, stat.S_IMODE(st.st_mode) & 0o777)
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        if dst.is_dir() and not dst.is_symlink():
            shutil.rmtree(dst)
        os.replace(tmp, dst)
    finally:
        os.close(fd)


def _mirror_dir(
    src_dir: int, dst: Path, budget: _Budget, links: dict[tuple[int, int], Path]
) -> None:
    with os.scandir(src_dir) as it:
        entries = list(it)
    keep: set[str] = set()
    for entry in entries:
        if budget.entries_left <= 0:
            budget.exceeded = True
            break
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        target = dst / entry.name
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            if not budget.take(0):
                continue
            keep.add(entry.name)
            if target.is_symlink() or (target.exists() and not target.is_dir()):
                _remove(target)
            target.mkdir(mode=0o755, exist_ok=True)
            try:
                sub = os.open(entry.name, _DIR_FLAGS, dir_fd=src_dir)
            except OSError:
                continue
            try:
                _mirror_dir(sub, target, budget, links)
            finally:
                os.close(sub)
        elif stat.S_ISLNK(mode):
            if not budget.take(0):
                continue
            keep.add(entry.name)
            with contextlib.suppress(OSError):
                link = os.readlink(entry.name, dir_fd=src_dir)
                if target.is_symlink() and os.readlink(target) == link:
                    continue
                _remove(target)
                target.symlink_to(link)
        elif stat.S_ISREG(mode):
            key = (st.st_dev, st.st_ino)
            if st.st_nlink > 1 and key in links:  # a hard link holds no more disk
                if not budget.take(0):
                    continue
                keep.add(entry.name)
                with contextlib.suppress(OSError):
                    _remove(target)
                    os.link(links[key], target)
                continue
            if not budget.take(st.st_size):
                continue
            keep.add(entry.name)
            links[key] = target
            with contextlib.suppress(OSError):
                old = os.lstat(target)
                if (
                    stat.S_ISREG(old.st_mode)
                    and old.st_nlink == 1
                    and old.st_size == st.st_size
                    and old.st_mtime_ns == st.st_mtime_ns
                ):
                    continue
            with contextlib.suppress(OSError):
                _copy_file(src_dir, entry.name, st, target)
        # fifos, sockets and devices are not kept
    for old_entry in list(dst.iterdir()) if dst.is_dir() else []:
        if old_entry.name not in keep:
            _remove(old_entry)


def mirror(src: str | os.PathLike[str], dst: Path, limit_bytes: int) -> bool:
    """Make `dst` hold what `src` holds, copying at most `limit_bytes`; whether that was enough.

    `src` is opened once; everything under it is reached through directory descriptors with
    O_NOFOLLOW, so a link planted inside never leads the copy outside it.
    """
    budget = _Budget(limit_bytes)
    root = os.open(src, _DIR_FLAGS)
    try:
        _mirror_dir(root, dst, budget, {})
    finally:
        os.close(root)
    return not budget.exceeded


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                text = Path(f"/proc/{pid}/task/{task}/children").read_text()
                found += [int(p) for p in text.split()]
    return found


def _held(host: Path) -> tuple[int, int]:
    """(bytes, entries) the host folder holds: what the tmpfs starts with once seeded."""
    size = entries = 0
    seen: set[tuple[int, int]] = set()
    for folder, dirs, files in os.walk(host):
        for name in (*dirs, *files):
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(folder, name))
                entries += 1
                if (st.st_dev, st.st_ino) not in seen:  # a hard link holds nothing more
                    seen.add((st.st_dev, st.st_ino))
                    size += max(st.st_blocks * 512, _MIN_ENTRY)
    return size, entries


def tmpfs_bytes(host: Path, limit_bytes: int) -> int:
    """The size of the tmpfs for a workspace held at `host`: the limit, or, when the harness
    itself put more than that there (`Sandbox.write_file`), room for all of it plus a little, so
    the copy in is whole and the payload can delete files without losing the others."""
    return max(limit_bytes, _held(host)[0] + 2 * _FULL_BELOW)


class TmpfsWorkspace:
    """The host's side of a tmpfs workspace: is it full, and copy it back when the run ends."""

    def __init__(self, host: Path, inside: str, limit_bytes: int) -> None:
        self.host = host
        self.inside = inside.lstrip("/")
        self.limit_bytes = tmpfs_bytes(host, limit_bytes)
        self._outer: int | None = None
        self._start_bytes = self._start_entries = 0
        self._inner: int | None = None
        self.full = False
        self.lost = False
        """True when the run's files could not be copied back (no process left inside)."""

    def start(self, pid: int) -> None:
        """`pid` is the bwrap process the host started; the sandbox's init is its child."""
        self._outer = pid
        self._start_bytes, self._start_entries = _held(self.host)

    def _root(self) -> str | None:
        if self._inner is None and self._outer is not None:
            kids = _children(self._outer)
            self._inner = kids[0] if kids else None
        if self._inner is None:
            return None
        path = f"/proc/{self._inner}/root/{self.inside}"
        try:
            os.stat(path)
        except OSError:
            return None
        return path

    def over(self) -> bool:
        """Whether the payload has met the disk limit: the tmpfs is full, or holds more entries
        than the copy back may make (one per 4 KiB of the limit), and more than it started
        with (a workspace seeded full can still be emptied)."""
        root = self._root()
        if root is None:
            return False
        with contextlib.suppress(OSError):
            vfs = os.statvfs(root)
            used = (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize
            entries = vfs.f_files - vfs.f_ffree - 1  # the root itself is no entry
            if vfs.f_bavail * vfs.f_frsize < _FULL_BELOW and used > self._start_bytes:
                self.full = True
            if entries > self.limit_bytes // _MIN_ENTRY and entries > self._start_entries:
                self.full = True
        return self.full

    def finish(self) -> bool:
        """Copy the tmpfs back into the host folder (before the tree is killed); whether the
        disk limit was met, during the run or by what the copy would have had to write."""
        self.over()
        root = self._root()
        if root is None:
            self.lost = True
            return self.full
        try:
            fits = mirror(root, self.host, self.limit_bytes)
        except OSError:
            self.lost = True
            return self.full
        return self.full or not fits
