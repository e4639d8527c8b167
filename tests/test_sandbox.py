"""Functional tests of the sandbox: interface, limits model, registry, evidence, backends."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_backintel.evidence.query_channel import QueryChannel
from pytest_backintel.sandbox import (
    ExecResult,
    Limits,
    SandboxError,
    SandboxPathError,
    SandboxUnavailable,
)
from pytest_backintel.sandbox.bwrap import BwrapProvider
from pytest_backintel.sandbox.docker_backend import DockerProvider
from pytest_backintel.sandbox.evidence import (
    PythonEvidenceError,
    PythonEvidenceValues,
    parse_metric_json,
    run_python_evidence,
)
from pytest_backintel.sandbox.limits import Observed, classify
from pytest_backintel.sandbox.registry import (
    UnknownSandboxError,
    available_sandboxes,
    create_provider,
    default_sandbox,
    load_provider_class,
)
from pytest_backintel.sandbox.subprocess_backend import SubprocessProvider
from stores.base import DatasetFiles
from stores.sqlite.store import SQLiteStore

FAST = Limits(
    wall_time_s=5,
    cpu_time_s=4,
    memory_mb=512,
    max_processes=32,
    max_file_size_mb=4,
    max_output_bytes=4096,
    output_kill_bytes=1 << 20,
)


def make_store(path: Path) -> Path:
    """A small SQLite store: orders(id, status, amount)."""
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE orders (id INTEGER, status TEXT, amount REAL)")
        con.executemany(
            "INSERT INTO orders VALUES (?, ?, ?)",
            [(i, ("delivered", "canceled", "shipped")[i % 3], i * 1.5) for i in range(300)],
        )
    con.close()
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_store(tmp_path_factory.mktemp("store") / "bi_0123456789ab.sqlite")


@pytest.fixture(scope="module", params=["bwrap", "subprocess"])
def provider(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BwrapProvider | SubprocessProvider]:
    cls = BwrapProvider if request.param == "bwrap" else SubprocessProvider
    with cls(tmp_path_factory.mktemp(request.param), limits=FAST) as prov:
        yield prov


# -- limits model --------------------------------------------------------------------------


def test_limits_reject_non_positive_and_inconsistent_values() -> None:
    assert Limits(wall_time_s=1).wall_time_s == 1
    with pytest.raises(ValueError, match="wall_time_s must be positive"):
        Limits(wall_time_s=0)
    with pytest.raises(ValueError, match="output_kill_bytes"):
        Limits(max_output_bytes=10, output_kill_bytes=5)


def test_rlimits_include_nproc_only_without_a_cgroup() -> None:
    assert "RLIMIT_NPROC" in Limits().rlimits(nproc=True)
    assert "RLIMIT_NPROC" not in Limits().rlimits(nproc=False)
    assert Limits(memory_mb=100).rlimits(nproc=False)["RLIMIT_DATA"] == [100 << 20, 100 << 20]


def _obs(**kw: object) -> Observed:
    base: dict[str, object] = {
        "killed_for": None,
        "returncode": 1,
        "signal": None,
        "cpu_s": 0.1,
        "pids_limit_hit": False,
        "oom_killed": False,
        "stderr_tail": "",
    }
    base.update(kw)
    return Observed(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("observed", "expected"),
    [
        (_obs(killed_for="wall_time"), "wall_time"),
        (_obs(killed_for="wall_time", pids_limit_hit=True), "processes"),
        (_obs(killed_for="output"), "output"),
        (_obs(signal=24, returncode=-24), "cpu_time"),
        (_obs(signal=9, returncode=-9, cpu_s=4.0), "cpu_time"),
        (_obs(signal=9, returncode=-9, cpu_s=0.2), None),
        (_obs(stderr_tail="Traceback\nMemoryError\n"), "memory"),
        (_obs(stderr_tail="MemoryError", returncode=0), None),
        (_obs(stderr_tail="BlockingIOError: [Errno 11] Resource"), "processes"),
        (_obs(stderr_tail="OSError: [Errno 27] File too large"), "file_size"),
        (_obs(oom_killed=True), "memory"),
        (_obs(returncode=0), None),
        (_obs(stderr_tail="ValueError: boom"), None),
    ],
)
def test_classify(observed: Observed, expected: str | None) -> None:
    assert classify(observed, FAST) == expected


# -- registry ------------------------------------------------------------------------------


def test_registry_names_and_closest_match() -> None:
    assert {"bwrap", "docker", "subprocess"} <= set(available_sandboxes())
    assert load_provider_class("bwrap") is BwrapProvider
    assert default_sandbox() == "bwrap"
    with pytest.raises(UnknownSandboxError, match=r"Did you mean 'bwrap'\?.*Available: bwrap"):
        load_provider_class("bwarp")
    assert isinstance(create_provider("subprocess"), SubprocessProvider)


def test_unsafe_flag_and_warning() -> None:
    assert SubprocessProvider.unsafe is True
    assert SubprocessProvider.warning is not None
    assert "UNSAFE" in SubprocessProvider.warning
    assert BwrapProvider.unsafe is False
    assert BwrapProvider.warning is None
    assert SubprocessProvider(limits=FAST).describe()["unsafe"] is True


def test_docker_without_engine_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with pytest.raises(SandboxUnavailable, match=r"no Docker engine is reachable at unix://"):
        DockerProvider(tmp_path).setup_session()


# -- evidence parsing -----------------------------------------------------------------------

_json_values = st.one_of(
    st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(), st.none()
)


@given(st.dictionaries(st.text(min_size=1), _json_values), st.text(alphabet="abc \n"))
def test_parse_metric_json_reads_the_last_line(values: dict[str, object], noise: str) -> None:
    assert parse_metric_json(f"{noise}\n{json.dumps(values)}\n") == values


@pytest.mark.parametrize(
    "stdout", ["", "42", "[1, 2]", '{"a": NaN}', '{"a": Infinity}', "hello", '{"a": 1} extra']
)
def test_parse_metric_json_rejects(stdout: str) -> None:
    assert parse_metric_json(stdout) is None


def test_parse_metric_json_accepts_a_multiline_object() -> None:
    assert parse_metric_json('{\n  "a": 1,\n  "b": 2\n}\n') == {"a": 1, "b": 2}


# -- backends, functional -------------------------------------------------------------------


def test_print_one(provider: BwrapProvider | SubprocessProvider, tmp_path: Path) -> None:
    with provider.open(None, tmp_path) as sandbox:
        result = sandbox.exec("print(1)")
    assert result == ExecResult(0, "1\n", "", False, False, None, result.duration_s)
    assert result.ok


def test_exit_code_and_stderr_are_results(
    provider: BwrapProvider | SubprocessProvider, tmp_path: Path
) -> None:
    with provider.open(None, tmp_path) as sandbox:
        result = sandbox.exec("import sys; print('x', file=sys.stderr); sys.exit(3)")
    assert (result.returncode, result.stderr, result.limit_hit) == (3, "x\n", None)
    assert not result.ok
    assert "[exit code 3]" in result.to_text()


def test_polars_aggregation_over_the_store(
    provider: BwrapProvider | SubprocessProvider, store: Path, tmp_path: Path
) -> None:
    code = (
        "import json, polars as pl, backintel_store as bs\n"
        "df = bs.table('orders').group_by('status').agg(pl.len().alias('n')).sort('status')\n"
        "print(json.dumps(dict(zip(df['status'], df['n']))))\n"
    )
    with provider.open(store, tmp_path) as sandbox:
        result = sandbox.exec(code)
    assert result.ok, result.stderr
    assert json.loads(result.stdout) == {"canceled": 100, "delivered": 100, "shipped": 100}


def test_duckdb_and_sqlite3_read_the_store(
    provider: BwrapProvider | SubprocessProvider, store: Path, tmp_path: Path
) -> None:
    code = (
        "import backintel_store as bs\n"
        "print(bs.kind(), bs.tables())\n"
        "print(bs.duckdb().sql('SELECT round(sum(amount), 2) FROM orders').fetchall())\n"
        "print(bs.connect().execute('SELECT count(*) FROM orders').fetchall())\n"
        "import numpy, pyarrow\n"
    )
    with provider.open(store, tmp_path) as sandbox:
        result = sandbox.exec(code)
        assert result.ok, result.stderr
        assert result.stdout.splitlines() == ["sqlite ['orders']", "[(67275.0,)]", "[(300,)]"]
        write = sandbox.exec(
            "import backintel_store as bs; bs.connect().execute('DELETE FROM orders')"
        )
    assert write.returncode == 1
    assert "readonly database" in write.stderr


def test_workspace_persists_between_calls_and_vanishes_after_close(
    provider: BwrapProvider | SubprocessProvider, tmp_path: Path
) -> None:
    sandbox = provider.open(None, tmp_path)
    assert sandbox.exec("open('notes.txt', 'w').write('kept')").ok
    again = sandbox.exec("print(open('notes.txt').read())")
    assert again.stdout == "kept\n"
    assert sandbox.read_file("notes.txt") == b"kept"
    sandbox.write_file("sub/in.txt", "from host")
    assert sandbox.exec("print(open('sub/in.txt').read())").stdout == "from host\n"
    workspace = sandbox.workspace
    assert workspace.is_dir()
    sandbox.close()
    assert not workspace.exists()
    fresh = provider.open(None, tmp_path)
    assert "FileNotFoundError" in fresh.exec("open('notes.txt')").stderr
    fresh.close()


def test_read_write_file_stay_inside_the_workspace(
    provider: BwrapProvider | SubprocessProvider, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    with provider.open(None, tmp_path) as sandbox:
        sandbox.exec(["ln", "-s", str(secret), "link"])
        assert (sandbox.workspace / "link").is_symlink()
        for bad in ("../secret.txt", "/etc/passwd", "link", ""):
            with pytest.raises(SandboxPathError):
                sandbox.read_file(bad)
        with pytest.raises(SandboxPathError):
            sandbox.write_file("../escape.txt", "x")
        sandbox.write_file(f"{sandbox.workspace_inside}/ok.txt", "fine")
        assert sandbox.read_file("ok.txt") == b"fine"
    assert not (tmp_path / "escape.txt").exists()


def test_argv_commands_and_closed_sandbox(
    provider: BwrapProvider | SubprocessProvider, tmp_path: Path
) -> None:
    sandbox = provider.open(None, tmp_path)
    assert sandbox.exec(["python", "-c", "print(2)"]).stdout == "2\n"
    missing = sandbox.exec(["no-such-program"])
    assert missing.returncode == 127
    assert "cannot start" in missing.stderr
    with pytest.raises(ValueError, match="non-empty argv"):
        sandbox.exec([])
    sandbox.close()
    with pytest.raises(Exception, match="closed"):
        sandbox.exec("print(1)")


def test_output_is_truncated_with_a_marker(
    provider: BwrapProvider | SubprocessProvider, tmp_path: Path
) -> None:
    with provider.open(None, tmp_path) as sandbox:
        small = sandbox.exec("print('y' * 4000)")
        big = sandbox.exec("print('y' * 10000)")
    assert not small.stdout_truncated
    assert big.stdout_truncated
    assert big.limit_hit is None
    assert big.stdout.startswith("y" * 4096)
    assert "[... output truncated: 5905 more bytes not shown, limit 4096 bytes]" in big.stdout


def test_timeout_argument_overrides_wall_time(
    provider: BwrapProvider | SubprocessProvider, tmp_path: Path
) -> None:
    with provider.open(None, tmp_path) as sandbox:
        quick = sandbox.exec("import time; time.sleep(0.3)", timeout=3)
        cut = sandbox.exec("import time; time.sleep(3)", timeout=0.8)
    assert quick.ok
    assert cut.limit_hit == "wall_time"
    assert cut.duration_s < 2


# -- evidence --------------------------------------------------------------------------------


def test_run_python_evidence(
    provider: BwrapProvider | SubprocessProvider, store: Path, tmp_path: Path
) -> None:
    good = run_python_evidence(
        provider,
        store,
        "import json, backintel_store as bs\n"
        "n = bs.connect().execute(\"SELECT count(*) FROM orders WHERE status='canceled'\")"
        ".fetchone()[0]\nprint('working...')\nprint(json.dumps({'canceled_orders': n}))",
        workdir=tmp_path,
    )
    assert isinstance(good, PythonEvidenceValues)
    assert good.values == {"canceled_orders": 100}
    cases = {
        "print('no json here')": "no_json",
        "raise SystemExit(2)": "exit",
        "while True: pass": "limit",
        "print('{' + '\"k\": 1,' * 5000 + '}')": "truncated",
    }
    for code, kind in cases.items():
        bad = run_python_evidence(provider, store, code, workdir=tmp_path)
        assert isinstance(bad, PythonEvidenceError), code
        assert bad.kind == kind, (code, bad.reason)


def test_evidence_runs_in_a_fresh_sandbox(
    provider: BwrapProvider | SubprocessProvider, store: Path, tmp_path: Path
) -> None:
    with provider.open(store, tmp_path) as sandbox:
        sandbox.exec("open('state.json', 'w').write('{\"x\": 1}')")
        reuse = run_python_evidence(
            provider, store, "print(open('state.json').read())", workdir=tmp_path
        )
    assert isinstance(reuse, PythonEvidenceError)
    assert reuse.kind == "exit"
    assert not list(tmp_path.glob("ws-*"))


def test_env_is_a_whitelist(
    provider: BwrapProvider | SubprocessProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BACKINTEL_TEST_SECRET", "s3cret")
    with provider.open(None, tmp_path) as sandbox:
        result = sandbox.exec("import os, json; print(json.dumps(dict(os.environ)))")
    env = json.loads(result.stdout)
    assert "BACKINTEL_TEST_SECRET" not in env
    assert "s3cret" not in result.stdout
    assert env["POLARS_MAX_THREADS"] == "2"
    assert os.environ["BACKINTEL_TEST_SECRET"] == "s3cret"


# -- docs/sandbox.md -------------------------------------------------------------------------


def test_docs_examples_run(store: Path, tmp_path: Path) -> None:
    text = (Path(__file__).parent.parent / "docs" / "sandbox.md").read_text()
    helper, evidence, host = re.findall(r"```python\n(.*?)```", text, re.S)
    backend = SQLiteStore(tmp_path / "stores")
    item = backend.provision(DatasetFiles("doc", store.parent, sqlite_path=store))
    with (
        QueryChannel(item.connect) as channel,
        BwrapProvider(tmp_path, limits=FAST) as provider,
        provider.open(item.mount_path, channel=channel.folder) as sandbox,
    ):
        shown = sandbox.exec(helper + "print(bs.kind(), bs.tables(), df.height)")
        assert shown.ok, shown.stderr
        assert shown.stdout.splitlines()[-1] == "sqlite ['orders'] 300"
        printed = sandbox.exec(evidence)
        assert parse_metric_json(printed.stdout) == {"canceled_orders": 100}, printed.stderr
    item.teardown()
    exec(compile(host, "docs/sandbox.md", "exec"), {})


def test_a_payload_that_kills_its_launcher_is_its_own_failure(
    provider: BwrapProvider | SubprocessProvider, tmp_path: Path
) -> None:
    with provider.open(None, tmp_path) as sandbox:
        result = sandbox.exec("import os, signal; os.kill(os.getppid(), signal.SIGKILL)")
    assert result.returncode != 0
    assert "ended without the launcher's report" in result.stderr


def test_a_sandbox_that_cannot_start_raises(tmp_path: Path) -> None:
    with BwrapProvider(tmp_path, limits=FAST) as provider:
        sandbox = provider.open(None, tmp_path)
        sandbox.workspace.rmdir()  # bwrap cannot bind a missing folder: set-up fails
        with pytest.raises(SandboxError, match="could not start"):
            sandbox.exec("print(1)")
