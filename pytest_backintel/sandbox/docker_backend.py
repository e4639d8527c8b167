"""The docker backend: one container per `exec`, via the docker SDK, when an engine is reachable.

The container has no network (`network_mode="none"`), a read-only root file system, all
capabilities dropped, memory/CPU/pids limits, runs as uid 65534 and is removed afterwards. The
harness's Python and site-packages are bind-mounted read-only from the host (so the engine must
be local), into an image that only needs a glibc userland ($BACKINTEL_SANDBOX_IMAGE, default
`debian:bookworm-slim`; it is never pulled at run time).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from pytest_backintel.sandbox._process import OutputBuffer, RawRun, to_result
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
    SandboxError,
    SandboxProvider,
    SandboxUnavailable,
)
from pytest_backintel.sandbox.disk import DiskWatch
from pytest_backintel.sandbox.limits import Limits

__all__ = ["DEFAULT_IMAGE", "DockerProvider", "DockerSandbox"]

DEFAULT_IMAGE = "debian:bookworm-slim"
_RUN_INSIDE = "/run/backintel"


def _docker_module() -> Any:
    try:
        return importlib.import_module("docker")
    except ImportError as exc:
        raise SandboxUnavailable(
            "the docker sandbox needs the docker SDK: run `uv add docker` (or choose "
            "--sandbox bwrap)"
        ) from exc


class DockerSandbox(ProviderSandbox):
    """One item's docker sandbox; every `exec` is a new container over the same workspace."""


class DockerProvider(SandboxProvider):
    """Containers on a reachable local Docker engine."""

    name: ClassVar[str] = "docker"
    foreign_uid: ClassVar[bool] = True

    def _check_available(self) -> None:
        docker = _docker_module()
        try:
            self._client = docker.from_env()
            self._client.ping()
        except Exception as exc:
            host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
            raise SandboxUnavailable(
                f"no Docker engine is reachable at {host} ({type(exc).__name__}: {exc}); start "
                "the engine or set DOCKER_HOST, or choose --sandbox bwrap"
            ) from exc
        self.image = os.environ.get("BACKINTEL_SANDBOX_IMAGE", DEFAULT_IMAGE)
        try:
            self._client.images.get(self.image)
        except Exception as exc:
            raise SandboxUnavailable(
                f"docker image {self.image!r} is not present on the engine; `docker pull "
                f"{self.image}` once (images are never pulled during a run) or set "
                "BACKINTEL_SANDBOX_IMAGE"
            ) from exc
        self._base, self._interpreter, self._site = python_paths()
        self._shipped = write_shipped(self.session_dir / "shipped", self._interpreter)

    def open(
        self, store_mount: Path | None, workdir: Path | None = None, channel: Path | None = None
    ) -> DockerSandbox:
        store, channel = self._mount(store_mount), self._channel(channel)
        workspace = self._new_workspace(workdir)
        workspace.chmod(0o777)  # the container user (65534) writes here
        return DockerSandbox(self, workspace, store, self.limits, channel)

    def _volumes(
        self, workspace: Path, store: Path | None, run_dir: Path, channel: Path | None = None
    ) -> dict[str, Any]:
        ro = "ro"
        volumes: dict[str, Any] = {
            str(self._base / "lib"): {"bind": str(self._base / "lib"), "mode": ro},
            str(self._interpreter): {"bind": str(self._interpreter), "mode": ro},
            str(self._site): {"bind": SITE_INSIDE, "mode": ro},
            str(self._shipped / "lib"): {"bind": LIB_INSIDE, "mode": ro},
            str(self._shipped / "bin"): {"bind": BIN_INSIDE, "mode": ro},
            str(self._shipped / "etc" / "passwd"): {"bind": "/etc/passwd", "mode": ro},
            str(workspace): {"bind": WORKSPACE, "mode": "rw"},
            str(run_dir): {"bind": _RUN_INSIDE, "mode": "rw"},
        }
        if store is not None:
            volumes[str(store)] = {"bind": f"{STORE_DIR}/{store.name}", "mode": ro}
        if channel is not None:  # the socket is connectable by the container's user (0o777)
            volumes[str(channel)] = {"bind": CHANNEL_DIR, "mode": ro}
        return volumes

    def run(
        self,
        cmd: str | Sequence[str],
        *,
        workspace: Path,
        store: Path | None,
        limits: Limits,
        channel: Path | None = None,
    ) -> ExecResult:
        run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=self.session_dir))
        run_dir.chmod(0o777)
        try:
            return to_result(self._run(cmd, workspace, store, limits, run_dir, channel), limits)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)

    def _run(
        self,
        cmd: str | Sequence[str],
        workspace: Path,
        store: Path | None,
        limits: Limits,
        run_dir: Path,
        channel: Path | None = None,
    ) -> RawRun:
        if isinstance(cmd, str):
            (run_dir / "cell.py").write_text(cmd, encoding="utf-8")
            payload = [str(self._interpreter), "-s", f"{_RUN_INSIDE}/cell.py"]
        else:
            payload = list(cmd)
        spec = launcher_spec(
            limits,
            nproc=False,
            python=self._interpreter,
            status=f"{_RUN_INSIDE}/status.json",
            argv=payload,
        )
        command = [str(self._interpreter), "-I", "-S", f"{LIB_INSIDE}/_launcher.py"]
        start = time.monotonic()
        try:
            container = self._client.containers.create(
                self.image,
                command=[*command, json.dumps(spec)],
                user=f"{SANDBOX_UID}:{SANDBOX_GID}",
                working_dir=WORKSPACE,
                environment=isolated_env(limits, store, channel),
                network_mode="none",
                read_only=True,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                mem_limit=f"{limits.memory_mb + 256}m",
                memswap_limit=f"{limits.memory_mb + 256}m",
                nano_cpus=limits.threads * 1_000_000_000,
                pids_limit=limits.max_processes,
                tmpfs={"/tmp": f"size={limits.tmp_size_mb}m"},
                volumes=self._volumes(workspace, store, run_dir, channel),
                detach=True,
            )
        except Exception as exc:
            raise SandboxError(f"docker could not create the sandbox container: {exc}") from exc
        try:
            return self._follow(container, limits, run_dir, start, workspace)
        finally:
            try:
                container.remove(force=True)
            except Exception as exc:
                raise SandboxError(f"docker could not remove container {container.id}") from exc

    def _follow(
        self, container: Any, limits: Limits, run_dir: Path, start: float, workspace: Path
    ) -> RawRun:
        out, err = OutputBuffer(limits.max_output_bytes), OutputBuffer(limits.max_output_bytes)
        killed: list[str] = []
        disk = DiskWatch([workspace], limits.disk_mb * 1024 * 1024)
        done = threading.Event()

        def watch_disk() -> None:
            while not done.wait(0.1):
                if disk.over() and not killed:
                    killed.append("disk")
                    container.kill()
                    return

        def pump() -> None:
            for chunk_out, chunk_err in container.attach(
                stdout=True, stderr=True, stream=True, logs=True, demux=True
            ):
                out.feed(chunk_out or b"")
                err.feed(chunk_err or b"")
                if out.total + err.total > limits.output_kill_bytes and not killed:
                    killed.append("output")
                    container.kill()

        reader = threading.Thread(target=pump, daemon=True)
        watcher = threading.Thread(target=watch_disk, daemon=True)
        container.start()
        reader.start()
        watcher.start()
        exit_code = -9
        try:
            exit_code = int(container.wait(timeout=limits.wall_time_s)["StatusCode"])
        except Exception:
            if not killed:
                killed.append("wall_time")
            container.kill()
        done.set()
        reader.join(timeout=5)
        watcher.join(timeout=5)
        container.reload()
        status_file = run_dir / "status.json"
        lines = status_file.read_text().splitlines() if status_file.exists() else []
        records = [json.loads(line) for line in lines if line.strip()]
        status = next((r for r in reversed(records) if "returncode" in r), None)
        kind = killed[0] if killed else None
        return RawRun(
            stdout=bytes(out.data),
            stderr=bytes(err.data),
            stdout_total=out.total,
            stderr_total=err.total,
            status=status,
            killed_for="output"
            if kind == "output"
            else "disk"
            if kind == "disk"
            else "wall_time"
            if kind
            else None,
            exit_code=exit_code,
            duration_s=time.monotonic() - start,
            pids_limit_hit=False,
            oom_killed=bool(container.attrs["State"].get("OOMKilled")),
            launcher_started=bool(records),
        )
