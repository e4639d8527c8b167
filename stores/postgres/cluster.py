"""A throwaway PostgreSQL cluster: initdb + pg_ctl in a temporary folder on a free port.

Used by the `postgres` store when `BACKINTEL_PG_DSN=initdb`. PostgreSQL refuses to run as root,
so under root the folder is handed to the `postgres` user and every server command runs through
`runuser -u postgres --`. The cluster trusts local connections, listens on 127.0.0.1 only (and
a socket in its own folder), runs with fsync off, and is stopped (`-m immediate`) and deleted by
`stop()`, which also runs at interpreter exit as a safety net.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from stores.base import StoreError

__all__ = ["ThrowawayCluster", "find_binary"]

RUN_AS = "postgres"


def find_binary(name: str) -> str:
    """`initdb`/`pg_ctl` on PATH or in /usr/lib/postgresql/<version>/bin (newest first)."""
    found = shutil.which(name)
    if found:
        return found
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        candidate = Path(folder) / name
        if candidate.is_file():
            return str(candidate)
    raise StoreError(
        f"BACKINTEL_PG_DSN=initdb needs the PostgreSQL server binary {name!r}, which is not on "
        "PATH nor in /usr/lib/postgresql/*/bin: install the server (e.g. `apt-get install "
        "postgresql`) or point BACKINTEL_PG_DSN at a running server"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThrowawayCluster:
    """One private server; `start()` returns its admin DSN."""

    def __init__(self) -> None:
        self.root: Path | None = None
        self.port: int | None = None

    def _run(self, *args: str) -> None:
        prefix = ["runuser", "-u", RUN_AS, "--"] if os.geteuid() == 0 else []
        try:
            subprocess.run([*prefix, *args], check=True, capture_output=True, text=True, timeout=60)
        except subprocess.CalledProcessError as exc:
            raise StoreError(
                f"throwaway postgres: {' '.join(args[:2])} failed ({exc.returncode}): "
                f"{(exc.stderr or exc.stdout).strip()[-800:]}"
            ) from exc
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise StoreError(f"throwaway postgres: cannot run {args[0]}: {exc}") from exc

    def start(self) -> str:
        if self.root is not None:
            raise StoreError("throwaway postgres: this cluster is already started")
        initdb, pg_ctl = find_binary("initdb"), find_binary("pg_ctl")
        root = Path(tempfile.mkdtemp(prefix="backintel-pg-"))
        self.root = root
        atexit.register(self.stop)
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam(RUN_AS)
            except KeyError as exc:
                self.stop()
                raise StoreError(
                    f"throwaway postgres: running as root needs a {RUN_AS!r} user to run the "
                    "server as (PostgreSQL refuses root); create it or run as another user"
                ) from exc
            os.chown(root, user.pw_uid, user.pw_gid)
        self.port = free_port()
        data = root / "data"
        try:
            self._run(initdb, "-D", str(data), "-U", "postgres", "--auth=trust",
                      "-E", "UTF8", "--no-sync", "--no-instructions")  # fmt: skip
            options = (
                f"-p {self.port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off"
            )
            self._run(pg_ctl, "-D", str(data), "-o", options, "-l", str(root / "server.log"),
                      "-w", "-t", "60", "start")  # fmt: skip
        except StoreError:
            self.stop()
            raise
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        """Stop the server and delete its folder; safe to call twice."""
        root, self.root = self.root, None
        if root is None:
            return
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if (root / "data" / "postmaster.pid").exists():
            with contextlib.suppress(StoreError):
                self._run(find_binary("pg_ctl"), "-D", str(root / "data"), "-m", "immediate",
                          "-w", "stop")  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)
