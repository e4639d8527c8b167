"""Cleanup that reaches the server a killed run used: a run on a PostgreSQL source that only
takes passwords (SCRAM) is killed with SIGKILL; `backintel clean` without the password exits
non-zero naming every role it made and keeps its record; with the run's environment it drops
them all. (The `--store postgres` controller kill is in `test_pg_store_cleanup.py`.)"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from test_postgres_source import fill, project, scram_server  # noqa: F401 (a fixture)

BIN = Path(sys.executable).parent

SLOW = """
import time


class Slow:
    name, kind = "slow", "custom"

    def answer(self, task):
        time.sleep(600)


def slow(config):
    return Slow()
"""


def _roles(local: str) -> list[str]:
    import psycopg

    with psycopg.connect(local, autocommit=True) as con:
        rows = con.execute("SELECT rolname FROM pg_roles WHERE rolname LIKE 'bi\\_%' ORDER BY 1")
        return [str(r[0]) for r in rows.fetchall()]


def _clean(folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "backintel"), "clean"], cwd=folder, env=env, capture_output=True, text=True,
        check=False, timeout=120,
    )  # fmt: skip


def test_a_killed_run_on_a_password_only_server_is_cleaned_with_its_environment(
    tmp_path: Path,
    scram_server: tuple[str, int],  # noqa: F811
) -> None:
    import psycopg

    socket_dir, port = scram_server
    local = f"postgresql://postgres@/postgres?host={socket_dir}&port={port}"
    db, password = f"src_{secrets.token_hex(3)}", "pw-" + secrets.token_hex(8)
    user = f"killed_{secrets.token_hex(3)}"
    with psycopg.connect(local, autocommit=True) as con:
        con.execute(f'CREATE DATABASE "{db}"')
        con.execute(f"CREATE ROLE {user} LOGIN CREATEROLE PASSWORD '{password}'")
        con.execute(f"GRANT pg_read_all_data TO {user} WITH ADMIN OPTION")
    fill(local.replace("/postgres?", f"/{db}?"))
    url = f"postgresql://{user}:{password}@127.0.0.1:{port}/{db}?sslmode=disable"
    folder = project(tmp_path / "suite", {"postgres": "SRC_DSN"})
    (folder / "slow.py").write_text(SLOW)
    base = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env = base | {"SRC_DSN": url, "BACKINTEL_DATA_DIR": str(tmp_path / "data")}
    build = subprocess.run(
        [str(BIN / "backintel"), "references", "build"], cwd=folder, env=env,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stdout + build.stderr
    before = _roles(local)
    run = subprocess.Popen(
        [str(BIN / "pytest"), "scenarios", "-p", "no:xdist", "--analyst", "slow:slow",
         "--run-id", "killed"],
        cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (made := sorted(set(_roles(local)) - set(before))):
            assert run.poll() is None, "the run ended before it made a role"
            assert time.monotonic() < deadline, "no role was made"
            time.sleep(0.2)
        time.sleep(0.5)  # the item's session is open as its role
    finally:
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
    made = sorted(set(_roles(local)) - set(before))
    assert made
    assert all(r.startswith("bi_") and r.endswith("_ro") for r in made), made

    for without in (base | {"BACKINTEL_DATA_DIR": env["BACKINTEL_DATA_DIR"]},
                    env | {"SRC_DSN": url.replace(f":{password}", "")}):  # fmt: skip
        refused = _clean(tmp_path, without)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert password not in refused.stdout + refused.stderr
        lines = [ln for ln in refused.stdout.splitlines() if ln.startswith("left behind: ")]
        assert len(lines) == 1, refused.stdout
        for role in made:
            assert role in lines[0], refused.stdout
        assert "PGPASSWORD" in lines[0], lines[0]
        assert "$SRC_DSN" in lines[0], lines[0]
        assert sorted(set(_roles(local)) - set(before)) == made  # nothing claimed, kept

    done = _clean(tmp_path, env)
    assert done.returncode == 0, done.stdout + done.stderr
    for role in made:
        assert f"dropped postgres {role}" in done.stdout, done.stdout
    assert password not in done.stdout + done.stderr
    assert sorted(set(_roles(local)) - set(before)) == []
    again = _clean(tmp_path, env)
    assert again.returncode == 0
    assert not [ln for ln in again.stdout.splitlines() if ln.startswith("left behind")]
    assert not any(role in again.stdout for role in made)
    assert not (tmp_path / "data" / "stores" / "postgres").exists() or not any(
        (tmp_path / "data" / "stores" / "postgres").iterdir()
    )  # the record went with the roles
    for path in (tmp_path / "data").rglob("*"):
        if path.is_file():
            assert password.encode() not in path.read_bytes(), path
