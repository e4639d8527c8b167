"""pytest hooks: each hands off to `BenchSession` or `collect` in a line or two."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_backintel.collect.backends import check_stores
from pytest_backintel.collect.install import shadowed_packages
from pytest_backintel.collect.items import (
    RUNNER_KEY,
    ScenarioFile,
    ScenarioItem,
    binding_lines,
    is_scenario_file,
)
from pytest_backintel.collect.manifests import ManifestFile, is_manifest
from pytest_backintel.collect.suites import rebind
from pytest_backintel.evidence.item_python import ItemPython
from pytest_backintel.options import add_options
from pytest_backintel.records.html_report import HtmlReport, header_lines, summary_lines
from pytest_backintel.records.live import LIVE
from pytest_backintel.run import heap
from pytest_backintel.run.junit_rates import add_junit_rates
from pytest_backintel.run.lock_check import check_collected, check_worker_ids
from pytest_backintel.run.matrix import matrix_summary
from pytest_backintel.run.progress import Progress
from pytest_backintel.run.scoped_python import ScopedPython
from pytest_backintel.run.session import SESSION_KEY, BenchSession
from pytest_backintel.run.unused_plugins import drop_unused_hypothesis
from stores.base import ProvisionedStore

MARKERS = {
    "development": "scenario of the development split (iterate freely)",
    "reserved": "scenario of the reserved split (frozen acceptance runs only)",
    "regression": "scenario of the regression split",
    "answerable": "scenario with a reference answer",
    "unanswerable": "scenario whose data cannot answer the question",
    "boundaries": "scenario with a scope, a denied grant or instructions planted in its data",
    **{f"level{n}": f"benchmark level {n}" for n in range(1, 9)},
    "prediction": "prediction scenario: held-out cohort scored against a baseline (level 8)",
    **{
        f"store_{name}": f"run on the {name} store backend"
        for name in (
            "sqlite",
            "duckdb",
            "postgres",
            "iceberg",
            "lake_parquet",
            "files",
            "files_mixed",
            "multi",
            "clickhouse",
            "clickhouse_server",
            "iceberg_s3",
            "sqlalchemy",
        )
    },
}


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    if problems := shadowed_packages():
        raise pytest.UsageError("\n".join(problems))
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")
    rebind(dict(config.getoption("--dataset") or []), config.invocation_params.dir)
    bench = config.stash[SESSION_KEY] = config.stash[RUNNER_KEY] = BenchSession(config)
    heap.hold()
    config.add_cleanup(heap.release)
    config.pluginmanager.register(Progress(config, LIVE), "backintel-progress")
    config.pluginmanager.register(_Counted(bench), "backintel-counted")
    if config.pluginmanager.hasplugin("html") and config.getoption("htmlpath", None):
        report = HtmlReport(bench.run_dir / "traces.jsonl", config.getoption("htmlpath"))
        config.pluginmanager.register(report, "backintel-html")


class _Counted:
    """Tells the session which items pytest counted (its records must agree after a stop)."""

    def __init__(self, bench: BenchSession) -> None:
        self.bench = bench

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.bench.count_report(report)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist controller: every worker writes into the controller's run folder."""
    node.workerinput["backintel_run_id"] = node.config.stash[SESSION_KEY].run_id


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist controller: every worker kept as many items ahead as it runs trials at once."""
    from pytest_backintel.collect.xdist_schedule import scheduler_for

    return scheduler_for(config, config.stash[SESSION_KEY].concurrency, log)


def pytest_sessionstart(session: pytest.Session) -> None:
    bench = session.config.stash[SESSION_KEY]
    heap.freeze_before_model(bench.runs_model_trials())  # before Pydantic AI's import
    bench.start()


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.File | None:
    if is_scenario_file(file_path.name):
        return ScenarioFile.from_parent(parent, path=file_path)
    if is_manifest(parent.config, file_path):
        return ManifestFile.from_parent(parent, path=file_path)
    return None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    check_stores(items, config.stash[SESSION_KEY].options.store)
    check_collected(config, items, config.stash[SESSION_KEY].dataset)  # before any request
    config.stash[SESSION_KEY].prepare_items(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """xdist controller: the references checked before the scheduler sends any item."""
    check_worker_ids(node.config, ids, node.config.stash[SESSION_KEY].dataset)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    session.config.stash[SESSION_KEY].count_items(session.items)  # the items left to run
    benchmark = any(isinstance(i, ScenarioItem) for i in session.items)
    drop_unused_hypothesis(session.config.pluginmanager, benchmark)
    heap.freeze_after_collection(benchmark)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    """After an item's fixtures are torn down: its dataset's probes go after its last item."""
    try:
        return (yield)
    finally:
        item.config.stash[SESSION_KEY].item_done(item)


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> list[str]:
    bench = config.stash[SESSION_KEY]
    return binding_lines(items, bench.options.store) + bench.reserved_note


def pytest_report_header(config: pytest.Config) -> list[str]:
    bench = config.stash[SESSION_KEY]
    return header_lines(bench.options, bench.run_dir, bench.sandbox_description())


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Generator[None, object, object]:
    result = yield  # every trial reported: the rates go into --junitxml before it is written
    bench = session.config.stash[SESSION_KEY]
    add_junit_rates(session.config, bench.run_dir, bench.is_controller)
    return result


@pytest.hookimpl(trylast=True)  # after xdist has stopped its workers: every record is written
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[SESSION_KEY].finish(int(exitstatus))


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    bench = config.stash.get(SESSION_KEY, None)  # None: configure stopped at a usage error
    heap.freeze_at_end(bench is not None and bool(bench.records))  # before the last collections


def pytest_terminal_summary(terminalreporter: Any) -> None:
    bench = terminalreporter.config.stash[SESSION_KEY]
    stop = bench.streak.message() if bench.run_dir.exists() else None
    for line in summary_lines(bench.outcomes, bench.run_dir, bench.records, stop):
        terminalreporter.write_line(line)
    for line in matrix_summary(bench):  # a model matrix's leaderboard
        terminalreporter.write_line(line)


@pytest.fixture
def backintel_store(request: pytest.FixtureRequest) -> Iterator[ProvisionedStore | None]:
    """The item's isolated store, provisioned under an opaque id and removed afterwards."""
    bench = request.config.stash[SESSION_KEY]
    item = request.node
    assert isinstance(item, ScenarioItem)
    if bench.pipeline is not None:  # the trial provisions its own store, ahead of the item
        yield None
        return
    try:
        store = bench.provision(item.scenario)
    except Exception as exc:
        bench.record_infra_error(item, exc)
        raise
    yield store
    store.teardown()


@pytest.fixture
def backintel_python(
    request: pytest.FixtureRequest, backintel_store: ProvisionedStore | None
) -> Iterator[ItemPython | ScopedPython | None]:
    """The item's sandbox for `run_python` (opened on first use) and Python evidence."""
    if backintel_store is None:  # a concurrent trial opens its own sandbox
        yield None
        return
    scenario = request.node.scenario if isinstance(request.node, ScenarioItem) else None
    python = request.config.stash[SESSION_KEY].item_python(backintel_store, scenario)
    yield python
    if python is not None:
        python.close()
