"""Harness self-tests: never reach a model provider.

The guard is an autouse fixture, so it holds for the items under `tests/` only: a benchmark
run from the repository root (whose `testpaths` include `tests`) still reaches its model.
Tests that drive the real provider path use `model_server`, a real OpenAI-compatible server
on 127.0.0.1, and model requests are allowed only while it runs.
"""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic_ai.models import override_allow_model_requests

from pytest_backintel.testing.model_server import ModelServer

pytest_plugins = ["pytester"]

# pytester projects live in temporary folders: they share the repository's built worlds
# instead of generating them again under each project's rootdir.
os.environ.setdefault("BACKINTEL_DATA_DIR", str(Path(__file__).resolve().parent.parent / "data"))

# Benchmarks time things; they run on their own (`BACKINTEL_BENCHMARKS=1 uv run pytest
# tests/benchmarks -p no:xdist`), never inside the test run, where timings would mean nothing.
collect_ignore = [] if os.environ.get("BACKINTEL_BENCHMARKS") else ["benchmarks"]


TESTS = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def _no_model_requests(request: pytest.FixtureRequest) -> Iterator[None]:
    """No test item of the harness may call a model provider. Checked by path as well: with
    a rootdir outside the repository, pytest may apply this fixture to every item."""
    if TESTS not in Path(request.node.path).resolve().parents:
        yield
        return
    with override_allow_model_requests(False):
        yield


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    """A real OpenAI-compatible test server on 127.0.0.1; model requests are allowed while
    it runs (they can only reach it or fail: no key for any outside provider is set)."""
    with ModelServer() as server, override_allow_model_requests(True):
        yield server


@pytest.fixture(scope="session")
def clickhouse_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The `clickhouse-server` store's environment: the user's own server when
    `BACKINTEL_CLICKHOUSE_DSN` is set, else a real server started here (`tests/clickhouse_local`)
    while `clickhouse-server` is on PATH (set in `os.environ` for the session), else nothing:
    the store then refuses to start, and the suite skips it or fails under `BACKINTEL_REQUIRE`."""
    from clickhouse_local import LocalClickHouse, available

    if os.environ.get("BACKINTEL_CLICKHOUSE_DSN") or not available():
        yield {}
        return
    server = LocalClickHouse.start(tmp_path_factory.mktemp("clickhouse-server"))
    with pytest.MonkeyPatch.context() as mp:
        for key, value in server.env.items():
            mp.setenv(key, value)
        try:
            yield server.env
        finally:
            server.stop()
