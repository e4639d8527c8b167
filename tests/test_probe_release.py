"""A dataset's data probes are closed once no more items of the session need them
(`Probes.release`, `SessionData.item_done`), not kept open to the session's end: their
provisioned stores go (real SQLite and DuckDB stores), while another dataset's probes keep
answering. A release waits for a trial holding the probes (`Probes.using`), and probes built
ahead are never built again for a released dataset, nor kept when a build under way ends
after the release."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_own_data import backintel, project, pytest_run
from test_own_data_tutorial import outcomes

from pytest_backintel.evidence.probe import DataProbe, Probes, ProbesReleased
from scenarios.olist.config import OlistConfig
from scenarios.olist.world import OlistWorld
from stores.base import DatasetFiles, Store
from stores.duckdb.store import DuckDBStore
from stores.sqlite.store import SQLiteStore

COUNT = "SELECT COUNT(*) FROM orders"


@pytest.fixture(params=["sqlite", "duckdb"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Store]]:
    """A real store backend of each kind: (spec, backend)."""
    kind = request.param
    store: Store = (
        SQLiteStore(tmp_path / kind) if kind == "sqlite" else DuckDBStore(tmp_path / kind)
    )
    yield kind, store
    store.teardown_session()


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> tuple[DatasetFiles, DatasetFiles]:
    """Two small generated worlds (two datasets)."""
    data = tmp_path_factory.mktemp("worlds")
    return (
        OlistWorld(OlistConfig(seed=1, orders=80)).ensure_built(data),
        OlistWorld(OlistConfig(seed=2, orders=80)).ensure_built(data),
    )


def answers(probes: list[DataProbe]) -> list[int]:
    """Each probe's order count (a probe that is closed raises)."""
    found = []
    for probe in probes:
        with probe.session() as session:
            found.append(session.run_sql(COUNT).rows[0][0])
    return found


def closed(probes: list[DataProbe]) -> bool:
    """Every probe's store is torn down: its file gone, a new session refused."""
    for probe in probes:
        assert probe.store.mount_path is not None
        if probe.store.mount_path.exists():
            return False
        with pytest.raises(Exception, match="torn down"):
            probe.store.connect()
    return True


def test_a_released_dataset_s_probes_are_closed_and_another_s_still_answer(
    tmp_path: Path, backend: tuple[str, Store], datasets: tuple[DatasetFiles, DatasetFiles]
) -> None:
    spec, store = backend
    first, second = datasets
    probes = Probes(lambda: tmp_path / "perturbed")
    try:
        done, going = probes.get(spec, store, first), probes.get(spec, store, second)
        assert len(done) == len(going) == 2
        before, counted = answers(going), answers(done)
        assert all(n > 0 for n in counted)
        probes.release(spec, str(first.parquet_dir))
        assert closed(done)
        assert answers(going) == before  # the other dataset's probes are untouched
        assert probes.get(spec, store, second) is going
        with pytest.raises(ProbesReleased):  # never built ahead again
            probes.get(spec, store, first, ahead=True)
        probes.warm(spec, store, first)
        assert probes._warming == {}
        again = probes.get(spec, store, first)  # a trial that still asks: built anew
        assert again is not done
        assert not closed(again)
        assert answers(again) == counted
    finally:
        probes.teardown()
    assert closed(going)
    assert closed(again)


def test_a_release_waits_for_the_trial_holding_the_probes(
    tmp_path: Path, backend: tuple[str, Store], datasets: tuple[DatasetFiles, DatasetFiles]
) -> None:
    spec, store = backend
    files = datasets[0]
    probes = Probes(lambda: tmp_path / "perturbed")
    try:
        with probes.using(spec, str(files.parquet_dir)):
            held = probes.get(spec, store, files)
            probes.release(spec, str(files.parquet_dir))
            assert not closed(held)
            assert all(n > 0 for n in answers(held))  # the trial still reads them
        assert closed(held)  # closed when the trial let go
    finally:
        probes.teardown()


def test_probes_being_built_ahead_when_released_are_closed_not_kept(
    tmp_path: Path,
    backend: tuple[str, Store],
    datasets: tuple[DatasetFiles, DatasetFiles],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec, store = backend
    files = datasets[0]
    probes = Probes(lambda: tmp_path / "perturbed")
    building, finish = threading.Event(), threading.Event()
    built: list[DataProbe] = []
    real = probes._build

    def slow_build(*args: object) -> list[DataProbe]:
        building.set()
        assert finish.wait(60)
        built.extend(real(*args))  # type: ignore[arg-type]
        return built

    monkeypatch.setattr(probes, "_build", slow_build)
    try:
        probes.warm(spec, store, files)  # the background build starts
        assert building.wait(60)
        release = threading.Thread(target=probes.release, args=(spec, str(files.parquet_dir)))
        release.start()  # waits for the build under way
        finish.set()
        release.join(60)
        assert not release.is_alive()
        assert len(built) == 2
        assert closed(built)
        key = (spec, str(files.parquet_dir))
        assert probes._probes.peek(key) is None
    finally:
        finish.set()
        probes.teardown()


def test_in_a_session_a_dataset_s_probes_close_after_its_last_item(tmp_path: Path) -> None:
    """The tutorial's project with `canceled-share` on a second copy of the shop (collected
    first): its probes are closed once it is done, before the first item of the shop itself,
    whose probes still answer; every trial passes."""
    folder = project(tmp_path)
    (folder / "shop2.sqlite").write_bytes((folder / "shop.sqlite").read_bytes())
    first = folder / "scenarios" / "canceled-share.scenario.yaml"
    first.write_text(first.read_text().replace("../shop.sqlite", "../shop2.sqlite"))
    assert backintel(folder, "references", "build").returncode == 0
    (folder / "scenarios" / "conftest.py").write_text(LOGGING)
    result = pytest_run(folder, "--run-id", "release")
    assert result.returncode == 0, result.stdout + result.stderr
    assert set(outcomes(folder, "release").values()) == {"pass"}
    log = (folder / "events.log").read_text().splitlines()
    next_dataset = next(i for i, e in enumerate(log) if "delivered-orders" in e)
    assert log[0].startswith("start")
    assert "canceled-share" in log[0]
    assert log[1:next_dataset].count("close") == 2  # the second shop's two probes
    assert log[next_dataset:].count("close") == 2  # the shop's, after its last item


LOGGING = """
from pathlib import Path

from pytest_backintel.evidence import probe

LOG = Path(__file__).resolve().parents[1] / "events.log"
_close = probe.DataProbe.close


def close(self):
    with LOG.open("a") as f:
        f.write("close\\n")
    _close(self)


probe.DataProbe.close = close


def pytest_runtest_logstart(nodeid, location):
    with LOG.open("a") as f:
        f.write(f"start {nodeid}\\n")
"""
