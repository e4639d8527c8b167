"""Files every isolating backend ships into the sandbox, and the environment it runs with."""

from __future__ import annotations

import shutil
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_backintel.sandbox.base import WORKSPACE, channel_inside, store_inside
from pytest_backintel.sandbox.limits import Limits
from pytest_backintel.sandbox.seed import seed_env

__all__ = [
    "BIN_INSIDE",
    "LIB_INSIDE",
    "SANDBOX_GID",
    "SANDBOX_UID",
    "SITE_INSIDE",
    "isolated_env",
    "launcher_spec",
    "python_paths",
    "sandbox_env",
    "write_shipped",
]

BIN_INSIDE = "/opt/backintel/bin"
"""`python` and `python3`, first on PATH."""
LIB_INSIDE = "/opt/backintel/lib"
"""The launcher and `backintel_store` inside the sandbox."""
SITE_INSIDE = "/opt/backintel/site-packages"
"""The project's site-packages inside the sandbox (read-only)."""
SANDBOX_UID = 65534
SANDBOX_GID = 65534

_HERE = Path(__file__).parent
_SHIPPED = {
    "_launcher.py": "_launcher.py",
    "backintel_store.py": "backintel_store.py",
    "_seeding.py": "sitecustomize.py",
    "_zygote.py": "_zygote.py",
}
"""Package file -> its name in the sandbox's lib folder (first on PYTHONPATH)."""


def write_shipped(dest: Path, interpreter: Path) -> Path:
    """Copy the launcher and helper into `dest/lib`, minimal passwd/group into `dest/etc`, and
    `python`/`python3` links to `interpreter` into `dest/bin`."""
    bin_dir = dest / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("python", "python3"):
        (bin_dir / name).symlink_to(interpreter)
    lib = dest / "lib"
    etc = dest / "etc"
    lib.mkdir(parents=True, exist_ok=True)
    etc.mkdir(parents=True, exist_ok=True)
    for name, inside in _SHIPPED.items():
        shutil.copyfile(_HERE / name, lib / inside)
    (etc / "passwd").write_text(
        f"root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
        f"sandbox:x:{SANDBOX_UID}:{SANDBOX_GID}:sandbox:{WORKSPACE}:/usr/sbin/nologin\n"
    )
    (etc / "group").write_text(f"root:x:0:\nsandbox:x:{SANDBOX_GID}:\n")
    (etc / "hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")
    return dest


def python_paths() -> tuple[Path, Path, Path]:
    """(base prefix, interpreter, site-packages) of the Python running the harness."""
    base = Path(sys.base_prefix)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    interpreter = base / "bin" / version
    if not interpreter.exists():
        interpreter = Path(sys.executable).resolve()
    site = Path(sysconfig.get_paths()["purelib"])
    return base, interpreter, site


def sandbox_env(
    limits: Limits,
    *,
    store: str | None,
    workspace: str,
    tmp: str,
    lib: str,
    site: str,
    path: str,
    query: str | None = None,
) -> dict[str, str]:
    """The whole environment of the payload: nothing of the host's passes through."""
    env = {
        "PATH": path,
        "HOME": workspace,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "PYTHONPATH": f"{lib}:{site}",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONNOUSERSITE": "1",
        "BACKINTEL_WORKSPACE": workspace,
        **limits.thread_env(),
        **seed_env(),
    }
    if store is not None:
        env["BACKINTEL_STORE"] = store
    if query is not None:
        env["BACKINTEL_QUERY"] = query
    return env


def isolated_env(limits: Limits, store: Path | None, channel: Path | None = None) -> dict[str, str]:
    """`sandbox_env` for an isolating backend, with its fixed paths inside the sandbox."""
    return sandbox_env(
        limits,
        store=store_inside(store),
        query=channel_inside(channel),
        workspace=WORKSPACE,
        tmp="/tmp",
        lib=LIB_INSIDE,
        site=SITE_INSIDE,
        path=f"{BIN_INSIDE}:/usr/bin:/bin",
    )


def launcher_spec(
    limits: Limits, *, nproc: bool, python: Path, status: str, argv: Sequence[str]
) -> dict[str, Any]:
    """What `_launcher.py` reads: rlimits, the interpreter, its status file, the payload argv."""
    return {
        "rlimits": limits.rlimits(nproc=nproc),
        "python": str(python),
        "status": status,
        "argv": list(argv),
    }
