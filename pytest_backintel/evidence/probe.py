"""The data probe: a perturbed copy of an item's dataset on the item's own backend, where
evidence is run again and must give what the evaluator's check query gives there.

One probe per backend spec and dataset, provisioned on first use and shared by the items of
a process (evidence only ever reads it, through read-only sessions that one trial at a time
uses and the next may reuse); torn down once the session's last item of the dataset is done
(`Probes.release`, `probe_leases`) or at the end of the session. The check query's values
on the probe are computed once per scenario.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_backintel.evidence.dialects import translate
from pytest_backintel.evidence.probe_build import probe_store
from pytest_backintel.evidence.probe_leases import ProbeLeases
from pytest_backintel.evidence.values import EVIDENCE_MAX_ROWS, values_from_result
from pytest_backintel.scenario import Scenario
from stores.base import (
    DatasetFiles,
    ProvisionedStore,
    QueryError,
    QueryTimeout,
    Store,
    StoreError,
    StoreSession,
)
from stores.common.once import OnceMap
from stores.probe import ViewProbeStore

if TYPE_CHECKING:
    from pytest_backintel.evidence.query_channel import SessionSource

__all__ = [
    "PROBE_TIME_FLOOR_S",
    "PROBE_TIME_MULTIPLE",
    "DataProbe",
    "ProbeTimeout",
    "Probes",
    "ProbesReleased",
    "PythonFactory",
    "probe_limit",
    "scenario_key",
]

PROBE_TIME_MULTIPLE = 10.0
PROBE_TIME_FLOOR_S = 10.0
"""A statement on a probe may run `PROBE_TIME_MULTIPLE` times what the same evidence took on
the source, and never less than `PROBE_TIME_FLOOR_S` (where the backend lets a session's limit
move, `StoreSession.set_time_limit`; elsewhere the store's own limit holds)."""


def scenario_key(scenario: Scenario) -> tuple[str, int]:
    """What a probe keeps per scenario under (its id and version)."""
    return (scenario.id, scenario.version)


def probe_limit(source_s: float) -> float:
    """The limit on a probe statement for evidence that took `source_s` on the source."""
    return max(PROBE_TIME_FLOOR_S, PROBE_TIME_MULTIPLE * source_s)


class ProbeTimeout(StoreError):
    """A probe query ran past its limit: the harness could not check the answer, which is
    neither passed nor failed for it (the trial ends `infra_error`, blocked)."""


PythonFactory = Callable[[Path | None, "SessionSource | None"], Callable[[str], Any] | None]
"""Given a store's mount path and a source of its sessions (the query channel's), a runner for
Python evidence over them (None: no sandbox)."""


class DataProbe:
    """A perturbed copy of one dataset on one backend, and the check values computed on it."""

    def __init__(
        self,
        store: ProvisionedStore,
        dialect: str,
        python: PythonFactory | None = None,
        notes: list[str] | None = None,
    ) -> None:
        self.store = store
        self.dialect = dialect
        self.notes = list(notes or [])
        """The tables this probe keeps whole, with why (`perturb.notes_of`): evidence over
        them alone is not checked against moved data."""
        self._python = python
        self._runner: list[Callable[[str], Any] | None] = []
        self._checks: dict[tuple[str, int], tuple[dict[str, Any], str | None]] = {}
        self.copy = False
        """Whether this probe is a copy of the data (a world's), not views over it."""
        self.still: dict[tuple[str, int], str] = {}
        """Per scenario, why its answer keeps its value on every probe (`probe_moves`)."""
        self._idle: list[StoreSession] = []
        """Sessions whose last statement ran cleanly, for the next trial to reuse: a new
        connection pays for reading the schema and the pages again (~1.5 ms on SQLite)."""
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def session(self, limit_s: float | None = None) -> Iterator[StoreSession]:
        """A read-only session on the probe, used by one caller at a time: an idle one or a
        new one, its statements allowed `limit_s` (None: the floor, `PROBE_TIME_FLOOR_S`).
        One whose statement raised is closed, not reused."""
        with self._lock:
            session = self._idle.pop() if self._idle else None
        session = session if session is not None else self.store.connect()
        session.set_time_limit(probe_limit(0.0) if limit_s is None else limit_s)
        try:
            yield session
        except BaseException:
            session.close()
            raise
        with self._lock:
            self._idle.append(session)

    def python(self) -> Callable[[str], Any] | None:
        """The Python evidence runner over the probe's mount and the probe's own sessions (its
        query channel reads the perturbed data), when the item has a sandbox; made on first
        use (a probe of views writes its file then)."""
        if self._python is None:
            return None
        if not self._runner:
            self._runner.append(self._python(self.store.mount_path, self.session))
        return self._runner[0]

    def ready(self) -> None:
        """Wait for the perturbed copy being written in the background, if any: the harness's
        time, which the answer's evidence budget does not pay."""
        if isinstance(self.store, ViewProbeStore):
            self.store.copy()

    def check(
        self, scenario: Scenario, limit_s: float | None = None
    ) -> tuple[dict[str, Any], str | None]:
        """The evaluator's check values on the perturbed copy, or a reason they are unknown;
        `ProbeTimeout` (not kept: the next trial tries again) when the check query runs past
        `limit_s` (`session`)."""
        key = (scenario.id, scenario.version)
        if key not in self._checks:
            if not scenario.check_sql:
                self._checks[key] = ({}, "the scenario has no check query")
            else:
                kinds = {m.name: m.kind for m in scenario.metrics}
                try:
                    sql = translate(scenario.check_sql, self.dialect)
                    with self.session(limit_s) as session:
                        result = session.run_sql(sql, max_rows=EVIDENCE_MAX_ROWS)
                    values, problems = values_from_result(result, list(kinds), kinds)
                    error = "; ".join(f"{k}: {v}" for k, v in problems.items()) or None
                except QueryTimeout as exc:
                    raise ProbeTimeout(
                        f"the check query did not finish on the perturbed copy of the data: "
                        f"{exc}. The harness could not check the answer, so the trial is "
                        "blocked (infra_error), not failed; run it again with --retry-blocked"
                    ) from exc
                except (QueryError, ValueError) as exc:
                    values, error = {}, f"the check query failed on the probe: {exc}"
                self._checks[key] = (values, error)
        return self._checks[key]

    def gaps(self, scenario: Scenario) -> list[str]:
        """What this probe cannot move for `scenario`: the tables it keeps whole, and why."""
        return list(self.notes)

    def unguarded(self, scenario: Scenario) -> str | None:
        """Why evidence of `scenario` was not checked against moved data here, when evidence
        reached this probe and the check values there are unknown (the check query failed or
        gave no value, or the scenario has none); else None."""
        found = self._checks.get((scenario.id, scenario.version))
        still = self.still.get((scenario.id, scenario.version))
        if found is None or found[1] is None:
            return still
        return f"evidence is not checked against moved data: {found[1]}"

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for session in idle:
            with contextlib.suppress(Exception):
                session.close()
        self.store.teardown()


SALTS = (1, 2)
"""One probe per salt: two independently perturbed copies, so a value that one copy happens
to leave unchanged (a rare count whose rows all survived) is still caught by the other."""


class ProbesReleased(StoreError):
    """Probes not built ahead: no more items of the session need them (`Probes.release`)."""


class Probes:
    """Probes by (backend spec, dataset folder), provisioned on first use, closed on release."""

    def __init__(self, cache_dir: Callable[[], Path]) -> None:
        self.cache_dir = cache_dir
        self._probes = OnceMap[tuple[str, str], list[DataProbe]]()
        """Built once per key; concurrent trials wait for the first build, not each other's."""
        self._warming: dict[tuple[str, str], threading.Thread] = {}
        self._warming_lock = threading.Lock()
        self._variants: dict[tuple[str, str], list[DataProbe]] = {}
        self.leases = ProbeLeases[tuple[str, str]](self._close)
        self.moves = OnceMap[tuple[str, str, str, int], list[DataProbe]]()
        """Per scenario, the probes found to move what the usual ones leave (`probe_moves`)."""

    def get(
        self,
        spec: str,
        backend: Store,
        files: DatasetFiles,
        python: PythonFactory | None = None,
        data_hash: str | None = None,
        *,
        ahead: bool = False,
    ) -> list[DataProbe]:
        """The probes of `files` on `backend`: a Parquet dataset, or a user's SQLite, DuckDB,
        CSV or PostgreSQL source (`data_hash` names its perturbed copies; a SQLite or
        PostgreSQL source's probes are views over it, `Store.view_probe_kind`). Built `ahead`
        of a trial, `ProbesReleased` once they have been released."""
        key = (spec, str(files.parquet_dir))

        def build() -> list[DataProbe]:
            if ahead and key in self.leases.released:
                raise ProbesReleased(f"the probes of {files.name!r} are released")
            return self._build(backend, files, python, data_hash)

        return self._probes.get(key, build)

    def using(self, spec: str, folder: str) -> contextlib.AbstractContextManager[None]:
        """Held by a trial while it may use the probes of `folder` on `spec`: no release
        closes them until it lets go."""
        return self.leases.using((spec, folder))

    def release(self, spec: str, folder: str) -> None:
        """Close the probes of `folder` on `spec` (every variant too) once no trial holds them:
        no more items of this session need them. A trial asking again builds them anew."""
        self.leases.release((spec, folder))

    def _close(self, key: tuple[str, str]) -> None:
        probes = self._probes.pop(key) or []  # waits for a build under way
        for moved in [k for k in self.moves.asked() if k[:2] == key]:
            self.moves.pop(moved)
        with self._warming_lock:
            variants = self._variants.pop(key, [])
        for probe in [*probes, *variants]:
            probe.close()

    def warm(
        self,
        spec: str,
        backend: Store,
        files: DatasetFiles,
        python: PythonFactory | None = None,
        data_hash: str | None = None,
        after: Callable[[], object] | None = None,
    ) -> None:
        """Start building the probes of `files` in the background (once per key), so a trial
        whose analyst takes seconds finds them ready when its evidence needs them. A failed
        build is not kept: the trial's own `get` tries again and reports the error. The
        thread first calls `after` (the session's wait for its first model request to come
        back), so the build does not take the GIL from the trial on its way to the model."""
        key = (spec, str(files.parquet_dir))
        with self._warming_lock:
            if key in self._warming or key in self.leases.released:
                return
            thread = threading.Thread(
                target=self._warm_one,
                args=(spec, backend, files, python, data_hash, after),
                name="backintel-probe-warm",
                daemon=True,
            )
            self._warming[key] = thread
        thread.start()

    def _warm_one(
        self,
        spec: str,
        backend: Store,
        files: DatasetFiles,
        python: PythonFactory | None,
        data_hash: str | None,
        after: Callable[[], object] | None,
    ) -> None:
        if after is not None:
            after()
        with contextlib.suppress(Exception):  # the trial's own `get` reports it
            self.get(spec, backend, files, python, data_hash, ahead=True)

    def _build(
        self,
        backend: Store,
        files: DatasetFiles,
        python: PythonFactory | None,
        data_hash: str | None,
    ) -> list[DataProbe]:
        from pytest_backintel.evidence.perturb import source_form

        form = source_form(files)
        served = getattr(backend, "provision_probe", None)
        if form is None and callable(served):  # a store that serves its own probes
            try:
                return [DataProbe(served(files, salt), backend.dialect, python) for salt in SALTS]
            except StoreError:
                raise
            except Exception as exc:  # the store's driver errors
                raise StoreError(
                    f"could not build the data probe of {files.name!r}: {exc}"
                ) from exc
        views = self._view_plan(backend, files, form)
        if form is None and views is None:
            return []  # no data of a form the probe can copy: tables-read check only
        return [self._one(backend, files, python, data_hash, salt, None, views) for salt in SALTS]

    def variant(
        self,
        spec: str,
        backend: Store,
        files: DatasetFiles,
        python: PythonFactory | None,
        data_hash: str | None,
        salt: int,
        moving: tuple[str, ...],
    ) -> DataProbe | None:
        """A probe that must move an answer (`probe_moves`): small tables drop rows, integers
        grow, rows holding one of `moving` in a text column go; None for a store that serves
        its own probes (it has no such variant). Closed with the others of `spec`."""
        from pytest_backintel.evidence.perturb import source_form

        form = source_form(files)
        views = self._view_plan(backend, files, form)
        if views is None and form is None:
            return None
        if views is not None:
            from stores.common.view_plan import moving_plans

            kind, plan, notes = views
            views = (kind, moving_plans(plan, moving), notes)
        probe = self._one(backend, files, python, data_hash, salt, moving, views)
        with self._warming_lock:
            self._variants.setdefault((spec, str(files.parquet_dir)), []).append(probe)
        return probe

    def _one(
        self,
        backend: Store,
        files: DatasetFiles,
        python: PythonFactory | None,
        data_hash: str | None,
        salt: int,
        moving: tuple[str, ...] | None,
        views: Any,
    ) -> DataProbe:
        try:
            args = (backend, files, self.cache_dir(), salt, data_hash, moving, views)
            store, notes = probe_store(*args)
        except StoreError:
            raise
        except Exception as exc:  # sqlite3, DuckDB, psycopg, polars, OS errors
            why = f"could not build the data probe of {files.name!r}: {exc}"
            raise StoreError(why) from exc
        probe = DataProbe(store, backend.dialect, python, notes)
        probe.copy = views is None
        return probe

    def _view_plan(self, backend: Store, files: DatasetFiles, form: str | None) -> Any:
        """(kind, plans, notes) when `backend` declares its probes served as views over the
        source (`capabilities.perturbation`, `Store.view_probe_kind`), else None."""
        if backend.capabilities.perturbation != "views":
            return None
        kind = backend.view_probe_kind(form)
        if kind is None:
            return None
        try:
            return (kind, *kind.plan(backend, files))
        except Exception as exc:  # engine or OS errors
            raise StoreError(f"could not plan the data probe of {files.name!r}: {exc}") from exc

    def teardown(self) -> None:
        with self._warming_lock:
            warming, self._warming = list(self._warming.values()), {}
        for thread in warming:
            thread.join()
        with self._warming_lock:
            variants, self._variants = list(self._variants.values()), {}
        for group in [*self._probes.drain(), *variants]:
            for probe in group:
                probe.close()
