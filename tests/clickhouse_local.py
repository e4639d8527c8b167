"""A real ClickHouse server (Debian's `clickhouse-server`, 18.16) for the tests, in a temp folder.

`LocalClickHouse.start(root)` writes a config (HTTP and native ports on 127.0.0.1, data under
`root`), a users file with a `default` admin account for provisioning and an `analyst` account
whose profile is `readonly=1` with `max_execution_time` and `max_memory_usage`, starts the
server and waits until it answers. `env` is what the `clickhouse-server` store reads.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LocalClickHouse", "available"]

_CONFIG = """<yandex>
  <logger><level>warning</level><log>{root}/server.log</log>
    <errorlog>{root}/server.err.log</errorlog><console>0</console></logger>
  <http_port>{http}</http_port>
  <tcp_port>{tcp}</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>{root}/data/</path>
  <tmp_path>{root}/tmp/</tmp_path>
  <user_files_path>{root}/user_files/</user_files_path>
  <format_schema_path>{root}/format_schemas/</format_schema_path>
  <users_config>{root}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mark_cache_size>268435456</mark_cache_size>
  <max_concurrent_queries>32</max_concurrent_queries>
</yandex>
"""
_USERS = """<yandex>
  <profiles>
    <default><max_memory_usage>2000000000</max_memory_usage></default>
    <analyst>
      <readonly>1</readonly>
      <max_execution_time>{timeout}</max_execution_time>
      <max_memory_usage>256000000</max_memory_usage>
      <max_threads>1</max_threads>
      <join_use_nulls>1</join_use_nulls>
    </analyst>
  </profiles>
  <users>
    <default><password>{admin}</password><networks><ip>127.0.0.1</ip></networks>
      <profile>default</profile><quota>default</quota></default>
    <analyst><password>{analyst}</password><networks><ip>127.0.0.1</ip></networks>
      <profile>analyst</profile><quota>default</quota></analyst>
  </users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>
    <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time>
  </interval></default></quotas>
</yandex>
"""


def available() -> bool:
    return shutil.which("clickhouse-server") is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LocalClickHouse:
    root: Path
    http_port: int
    admin_password: str
    analyst_password: str
    process: subprocess.Popen[bytes]

    @classmethod
    def start(cls, root: Path, timeout_s: float = 1) -> LocalClickHouse:
        root.mkdir(parents=True, exist_ok=True)
        http, tcp = _free_port(), _free_port()
        admin, analyst = secrets.token_hex(8), secrets.token_hex(8)
        (root / "config.xml").write_text(_CONFIG.format(root=root, http=http, tcp=tcp))
        (root / "users.xml").write_text(
            _USERS.format(timeout=f"{timeout_s:g}", admin=admin, analyst=analyst)
        )
        process = subprocess.Popen(
            ["clickhouse-server", f"--config-file={root / 'config.xml'}"],
            stdout=subprocess.DEVNULL,
            stderr=(root / "stderr.log").open("wb"),
            start_new_session=True,
        )
        server = cls(root, http, admin, analyst, process)
        server.wait()
        return server

    @property
    def env(self) -> dict[str, str]:
        return {
            "BACKINTEL_CLICKHOUSE_DSN": f"http://default:{self.admin_password}@127.0.0.1:{self.http_port}",
            "BACKINTEL_CLICKHOUSE_ANALYST": f"analyst:{self.analyst_password}",
        }

    def wait(self, limit_s: float = 60) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = (self.root / "server.err.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"clickhouse-server exited ({self.process.returncode}): {err}")
            url = f"http://127.0.0.1:{self.http_port}/ping"
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2):
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"clickhouse-server did not answer on port {self.http_port}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)
