"""An S3-compatible endpoint: the user's own (by URL), or a local moto server started here.

`BACKINTEL_S3_ENDPOINT` names the user's endpoint (`http://host:9000`, `https://...`), with
`BACKINTEL_S3_BUCKET` (default `backintel`), `BACKINTEL_S3_KEY_ID`, `BACKINTEL_S3_SECRET` and
`BACKINTEL_S3_REGION` (default `us-east-1`). Unset, `MotoServer` starts `moto_server` (moto's
real HTTP S3 implementation, from the `moto[server]` package) on 127.0.0.1 at a free port for
the session; it is stopped by `stop()`, and dies with the process that started it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from stores.base import StoreError
from stores.common.lasting_start import start_lasting

__all__ = ["ENDPOINT_ENV", "MotoServer", "S3Endpoint", "endpoint_from_env"]

ENDPOINT_ENV = "BACKINTEL_S3_ENDPOINT"


@dataclass(frozen=True)
class S3Endpoint:
    """Where a warehouse lives and how to sign requests to it."""

    url: str
    bucket: str
    key_id: str
    secret: str
    region: str = "us-east-1"

    @property
    def host(self) -> str:
        """`host:port`, as DuckDB's S3 secret wants its ENDPOINT."""
        return urlsplit(self.url).netloc

    @property
    def use_ssl(self) -> bool:
        return urlsplit(self.url).scheme == "https"

    def pyiceberg_properties(self) -> dict[str, str]:
        return {
            "s3.endpoint": self.url,
            "s3.access-key-id": self.key_id,
            "s3.secret-access-key": self.secret,
            "s3.region": self.region,
        }

    def filesystem(self) -> Any:
        """A pyarrow S3 file system on this endpoint (paths are `<bucket>/<key>`)."""
        from pyarrow import fs

        parts = urlsplit(self.url)
        return fs.S3FileSystem(
            access_key=self.key_id,
            secret_key=self.secret,
            region=self.region,
            endpoint_override=parts.netloc,
            scheme=parts.scheme or "http",
            allow_bucket_creation=True,
        )


def endpoint_from_env() -> S3Endpoint | None:
    """The user's endpoint from `BACKINTEL_S3_*`, or None when `BACKINTEL_S3_ENDPOINT` is unset."""
    url = os.environ.get(ENDPOINT_ENV, "").strip()
    if not url:
        return None
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
        raise StoreError(
            f"{ENDPOINT_ENV}={url!r} is not an http(s) URL; write it as http://host:port"
        )
    missing = [k for k in ("BACKINTEL_S3_KEY_ID", "BACKINTEL_S3_SECRET") if not os.environ.get(k)]
    if missing:
        raise StoreError(f"{ENDPOINT_ENV} is set but {', '.join(missing)} is not")
    return S3Endpoint(
        url=url.rstrip("/"),
        bucket=os.environ.get("BACKINTEL_S3_BUCKET", "backintel"),
        key_id=os.environ["BACKINTEL_S3_KEY_ID"],
        secret=os.environ["BACKINTEL_S3_SECRET"],
        region=os.environ.get("BACKINTEL_S3_REGION", "us-east-1"),
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class MotoServer:
    """`moto_server` on 127.0.0.1 at a free port, its log under `log_dir` while it runs (the
    end of it is quoted when the server does not start)."""

    def __init__(self, log_dir: Path, startup_s: float = 30.0) -> None:
        self.log_dir = log_dir
        self.startup_s = startup_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None

    def start(self) -> S3Endpoint:
        exe = Path(sys.executable).parent / "moto_server"
        if not exe.exists():
            found = shutil.which("moto_server")
            if found is None:
                raise StoreError(
                    "the iceberg-s3 store needs moto_server: run `uv add 'moto[server]'`"
                )
            exe = Path(found)
        port = _free_port()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self._log = self.log_dir / f"moto-{port}.log"
        with log.open("wb") as out:  # from the lasting thread: it dies with that thread
            self._proc = start_lasting(
                lambda: subprocess.Popen(
                    [str(exe), "-H", "127.0.0.1", "-p", str(port)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    preexec_fn=_die_with_parent,
                )
            )
        deadline = time.monotonic() + self.startup_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                key, secret = f"bi{secrets.token_hex(8)}", secrets.token_hex(16)  # moto takes any
                return S3Endpoint(f"http://127.0.0.1:{port}", "backintel", key, secret)
            time.sleep(0.1)
        tail = log.read_text(errors="replace")[-800:]
        self.stop()
        raise StoreError(f"moto_server did not start on 127.0.0.1:{port}; its log ends: {tail}")

    def stop(self) -> None:
        """Stop the server and remove its (request) log."""
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if self._log is not None:
            self._log.unlink(missing_ok=True)
            self._log = None
