"""A session's state and what it builds once per process: the analyst, worlds and their
datasets, stores, probes, the sandbox and tracing (`BenchSession` is built on it)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_backintel.analyst_api import Analyst, AnalystConfig
from pytest_backintel.collect.backends import StoreBackends, backend_for, store_spec
from pytest_backintel.collect.items import ScenarioItem
from pytest_backintel.collect.manifests import manifest_reference
from pytest_backintel.collect.user_data import check_name, user_source, world_for
from pytest_backintel.collect.worlds import World, data_dir
from pytest_backintel.evidence.item_python import ItemPython, evidence_runner
from pytest_backintel.evidence.prediction import Check, shuffled_copy
from pytest_backintel.evidence.probe import DataProbe, Probes
from pytest_backintel.evidence.probe_move_cache import world_seed
from pytest_backintel.evidence.probe_moves import moving_probes
from pytest_backintel.options import BenchOptions, read_options
from pytest_backintel.records import run_folder
from pytest_backintel.records.live import LIVE
from pytest_backintel.records.power import resolve_trials
from pytest_backintel.records.summary_imports import BackgroundImports
from pytest_backintel.records.writer import RecordWriter, new_run_id
from pytest_backintel.run.analysts import load_analyst
from pytest_backintel.run.budget import RunBudget
from pytest_backintel.run.matrix import ModelMatrix, models_of
from pytest_backintel.run.pipeline import TrialPipeline
from pytest_backintel.run.resume import Resumption, check_resumed
from pytest_backintel.run.scoped_python import ScopedPython, item_files, scopeable
from pytest_backintel.run.streak import ProviderStreak
from pytest_backintel.run.suite_run import suite_analyst
from pytest_backintel.run.trial import TrialResult
from pytest_backintel.run.worker_death import die_with_controller
from pytest_backintel.run.world_builds import WorldBuilds, world_label
from pytest_backintel.sandbox.base import SandboxProvider, SandboxUnavailable
from pytest_backintel.sandbox.registry import UnknownSandboxError, create_provider
from pytest_backintel.sandbox.zygote import warm
from pytest_backintel.scenario import Scenario
from stores.base import DatasetFiles, ProvisionedStore, Store
from stores.capabilities import StoreCapabilities
from stores.common.fingerprint_cache import use_folder
from stores.registry import load_store_class

if TYPE_CHECKING:
    from pytest_backintel.records.tracing import Tracing

__all__ = ["SessionData"]


class SessionData:
    """Options, the run folder, the analyst, the store backend and worlds for this process."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        check_resumed(config)
        self.options: BenchOptions = run_folder.replayed(
            read_options(config, models_of(config), resolve_trials, suite_analyst(config))
        )
        self.matrix = ModelMatrix.of(self.options)  # None: one model, or none
        self.root = config.rootpath
        workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
        self.worker = workerinput["workerid"] if workerinput else "main"
        self.is_controller = workerinput is None
        if workerinput is not None:
            die_with_controller()
        self.run_id: str = (workerinput or {}).get("backintel_run_id") or (
            self.options.run_id or new_run_id()
        )
        self.run_dir = (self.root / self.options.results_dir / self.run_id).resolve()
        self.writer = RecordWriter(self.run_dir, self.worker)
        self.outcomes: Counter[str] = Counter()
        self.records: list[dict[str, Any]] = []
        self.reported: set[str] = set()
        """Items pytest counted in this process (under xdist, the controller: every worker's)."""
        self._parts_before: dict[str, int] = {}
        self._analyst: Analyst | None = None
        self.backends = StoreBackends(lambda: self.data_dir)
        self.probes = Probes(lambda: self.data_dir / "perturbed")
        use_folder(self.data_dir / "fingerprints")
        self._sandboxes: SandboxProvider | None = None
        self._tracing: Tracing | None = None
        self._sweep: threading.Thread | None = None
        self.summary_imports: BackgroundImports | None = None
        """The summary's libraries, imported in the background (`records.summary_imports`)."""
        self.model_answered = threading.Event()
        """Set when this process's first model request ends, answered or failed (or at the
        session's end): work that can wait (the PostgreSQL sweep, building the probes, the
        summary's imports) waits for it, so under one GIL it does not delay that request."""
        self.item_reported = threading.Event()
        """Set when pytest reports this process's first item (or at the session's end)."""
        LIVE.on_answer = self.model_answered.set
        self.budget = RunBudget(self.run_dir, self.options.run_limits)
        self.streak = ProviderStreak(self.run_dir, self.options.max_provider_failures)
        self._header: dict[str, Any] = {}
        self._worlds: dict[tuple[str, str], tuple[DatasetFiles, str, World]] = {}
        self.worlds_ahead: WorldBuilds[tuple[str, str], tuple[DatasetFiles, str, World]]
        self.worlds_ahead = WorldBuilds()
        LIVE.side_work = self.worlds_ahead.building
        self._ahead = threading.Lock()
        """Held while `probes_ahead` builds; the session's end takes it (`stop_ahead`) so no
        store is provisioned for a probe after the backends are torn down."""
        self._ahead_stopped = False
        self._capabilities: dict[str, StoreCapabilities | None] = {}
        self._items_left: Counter[tuple[str, str, str]] = Counter()
        """Items of this process not yet done, per (backend spec, world, snapshot)."""
        self._datasets_done: set[tuple[str, str, str]] = set()
        """Those whose last item is done: no probes built ahead for them."""
        self.reserved_cases: dict[str, set[str]] = {}
        """Every reserved case collected, per suite (a frozen run must take a suite whole)."""
        self.pipeline: TrialPipeline[ScenarioItem, tuple[TrialResult, str | None]] | None = None
        """Trials run ahead of pytest (`--concurrency` above 1); None for serial runs."""
        self._lock = threading.RLock()
        self._setup_gate = threading.Lock()
        """Trials run ahead set up one at a time (store, sandbox): setup is CPU under one GIL,
        so N trials setting up at once would each reach the model only after all N had."""
        """Guards what trials in worker threads build lazily: worlds, backends, the sandbox."""
        self.reserved_note: list[str] = []
        """The line saying reserved items were deselected from an unfrozen run."""
        self.resumption = (
            Resumption(self.run_dir, self.options.retry_blocked) if self.options.resume else None
        )
        """What `--resume`/`--retry-blocked` finishes (None for a new run)."""

    # -- lazily built, once per process --------------------------------------------------
    @property
    def analyst(self) -> Analyst:
        if self.matrix is not None:  # the first model's: every model's analyst is of one kind
            return self.matrix.analyst(None)
        if self._analyst is None:
            opts = self.options
            self._analyst = load_analyst(
                opts.analyst,
                AnalystConfig(opts.model, opts.model_base_url, opts.limits, opts.max_connections),
                unsandboxed=opts.analyst_unsandboxed,
                cwd=opts.analyst_dir,
            )
        return self._analyst

    def store_for(self, scenario: Scenario) -> Store:
        """The backend the scenario runs on (`--store`, or the one its binding needs)."""
        with self._lock:
            return backend_for(self.backends, scenario, self.options.store)

    @property
    def sandboxes(self) -> SandboxProvider:
        """The sandbox backend for `run_python` and Python evidence (set up on first use)."""
        with self._lock:
            if self._sandboxes is None:
                workdir = self.data_dir / "sandbox" / f"{os.getpid()}"
                try:
                    provider = create_provider(self.options.sandbox, workdir)
                    provider.setup_session()
                except (UnknownSandboxError, SandboxUnavailable) as exc:
                    raise pytest.UsageError(f"backintel: {exc}") from exc
                self._sandboxes = provider
            return self._sandboxes

    @property
    def tracing(self) -> Tracing:
        """Offline traces of this process's trials (instruments agents on first trial)."""
        from pytest_backintel.records.tracing import Tracing

        with self._lock:
            self._tracing = self._tracing or Tracing(self.run_dir, self.worker)
            return self._tracing

    def item_python(
        self, store: ProvisionedStore, scenario: Scenario | None = None
    ) -> ItemPython | ScopedPython | None:
        """Python for the item: its store's file mounted when it lives on disk, and a query
        channel to its own read-only sessions (a scoped folder, its reads watched, when the
        scenario declares a scope)."""
        if scenario is not None and scenario.scope is not None:
            files = self.dataset(scenario)[0]
            if scopeable(files):
                return ScopedPython(self.sandboxes, files, scenario.scope, store.connect)
            return ItemPython(self.sandboxes, None, store.connect)  # observed by its plans
        if scenario is not None and scenario.prediction is not None:
            # its program is re-run three times: the zygote starts while the analyst works
            warm(self.sandboxes, self.sandboxes.limits)
        return ItemPython(self.sandboxes, store.mount_path, store.connect)

    def provision(self, scenario: Scenario) -> ProvisionedStore:
        """The item's store (with the scope's denied grants withheld)."""
        backend = self.store_for(scenario)
        return backend.provision(item_files(self.dataset(scenario)[0], scenario.scope, backend))

    def probes_for(
        self,
        scenario: Scenario,
        with_python: bool,
        *,
        warm: bool = False,
        ahead: bool = False,
        reference: Callable[[], Mapping[str, Any]] | None = None,
    ) -> list[DataProbe]:
        """The data probes of the scenario's dataset on its backend (built once, shared by
        concurrent trials), with those that move its `reference` answer where the usual ones
        leave it (`probe_moves`); `warm` only starts building them in the background, `ahead`
        builds them unless they are released (`Probes.get`)."""
        python = evidence_runner(lambda: self.sandboxes) if with_python else None
        spec, (files, data_hash) = store_spec(scenario, self.options.store), self.dataset(scenario)
        if warm:
            store, after = self.store_for(scenario), self.model_answered.wait
            self.probes.warm(spec, store, files, python, data_hash, after)
            return []
        backend = self.store_for(scenario)
        if reference is None:
            return self.probes.get(spec, backend, files, python, data_hash, ahead=ahead)
        args = (spec, backend, files, python, data_hash, scenario, reference)
        key = (scenario.dataset.world, scenario.dataset.snapshot)
        world = self._worlds[key][2] if key in self._worlds else world_for(scenario.dataset)
        return moving_probes(self.probes, *args, world_seed(world, scenario.dataset.snapshot))

    def permuted_python(
        self, scenario: Scenario, check: Check = "labels"
    ) -> Callable[[str], Mapping[str, Any]] | None:
        """A Python evidence runner over the prediction scenario's dataset with its training
        labels permuted or its scoring features shuffled (`check`; a SQLite copy built once);
        None without a SQLite build."""
        spec = scenario.prediction
        files, data_hash = self.dataset(scenario)
        if spec is None or files.sqlite_path is None:
            return None
        copy = shuffled_copy(files.sqlite_path, spec, self.data_dir / "permuted", check, data_hash)
        return evidence_runner(lambda: self.sandboxes)(copy, None)

    @property
    def data_dir(self) -> Path:
        return data_dir(self.root)

    def dataset(self, scenario: Scenario) -> tuple[DatasetFiles, str]:
        """The built files of a scenario's world and their data hash (built once, locked)."""
        key = (scenario.dataset.world, scenario.dataset.snapshot)
        with self._lock:
            if (source := user_source(scenario.dataset)) is not None:
                check_name(self.__dict__.setdefault("_source_names", {}), source)
        built = self.worlds_ahead.get(key, lambda: self._build_world(scenario), world_label(key))
        with_sqlite = getattr(built[2], "with_sqlite", None)  # a world that writes it on demand
        if built[0].sqlite_path is None and with_sqlite and self._reads_sqlite(scenario):
            files = self._worlds[key][0]
            if files.sqlite_path is None:
                files = with_sqlite(files)  # under the world's file lock
                with self._lock:
                    self._worlds[key] = (files, *built[1:])
            return files, built[1]
        return built[:2]

    def _declared(self, spec: str) -> StoreCapabilities | None:
        """What backend `spec`'s class declares, without setting it up (this may be a
        short-lived thread building ahead), once per spec; None when it cannot be loaded (its
        own error comes when an item sets it up)."""
        if spec not in self._capabilities:
            try:
                self._capabilities[spec] = load_store_class(spec).capabilities
            except Exception:
                self._capabilities[spec] = None
        return self._capabilities[spec]

    def _reads_sqlite(self, scenario: Scenario) -> bool:
        """Whether the scenario's store reads a dataset's SQLite file (one that cannot be
        loaded is taken to)."""
        caps = self._declared(store_spec(scenario, self.options.store))
        return caps is None or caps.reads_sqlite_file

    def _build_world(self, scenario: Scenario) -> tuple[DatasetFiles, str, World]:
        key = (scenario.dataset.world, scenario.dataset.snapshot)
        with self._lock:
            world = world_for(scenario.dataset)
        build = getattr(world, "ensure_parquet", None)
        if build is None or self._reads_sqlite(scenario):
            build = world.ensure_built
        files = build(self.data_dir, snapshot=key[1])
        built = self._worlds[key] = (files, world.data_hash(files), world)
        return built

    def world_build_under_way(self, item: ScenarioItem) -> bool:
        """The item's world is being built by another thread now: its trial would only wait."""
        dataset = item.scenario.dataset
        return self.worlds_ahead.under_way((dataset.world, dataset.snapshot))

    def world_build_cost(self, scenario: Scenario) -> float:
        """About how many seconds building the scenario's world takes here (0 when it is built
        or the world cannot say: `World.build_cost`); the longest is built ahead first."""
        with self._lock:
            world = world_for(scenario.dataset)
        cost = getattr(world, "build_cost", None)
        return float(cost(self.data_dir, scenario.dataset.snapshot)) if callable(cost) else 0.0

    def probes_ahead(self, scenario: Scenario) -> None:
        """The data probes of the scenario's world, written ahead of the first trial that
        re-runs evidence there: at once on an embedded backend (`capabilities.server` None),
        else once an item has set its backend up (a server a backend starts must not start
        in this short-lived thread); a failure is left for that trial to report."""
        with self._ahead:
            spec = store_spec(scenario, self.options.store)
            with self._lock:
                caps = self._declared(spec)  # embedded: no server to start, safe in any thread
                ready = self.backends.is_set_up(spec) or (caps is not None and caps.server is None)
            done = self._probe_key(scenario) in self._datasets_done
            if ready and not self._ahead_stopped and not done:
                with contextlib.suppress(Exception):
                    self.probes_for(scenario, with_python=True, ahead=True)

    def _probe_key(self, scenario: Scenario) -> tuple[str, str, str]:
        dataset = scenario.dataset
        return store_spec(scenario, self.options.store), dataset.world, dataset.snapshot

    def count_items(self, items: list[pytest.Item]) -> None:
        """The items this process will run (after collection and deselection), counted per
        dataset and backend: a dataset's probes are released after its last (`item_done`)."""
        for item in items:
            if isinstance(item, ScenarioItem):
                self._items_left[self._probe_key(item.scenario)] += 1

    def item_done(self, item: pytest.Item) -> None:
        """At an item's teardown: after the last counted item of its dataset, that dataset's
        probes are closed (once no running trial holds them: `Probes.using`)."""
        if not isinstance(item, ScenarioItem):
            return
        key = self._probe_key(item.scenario)
        with self._lock:
            if self._items_left[key] == 0:  # not counted (or counted down already)
                return
            self._items_left[key] -= 1
            if self._items_left[key]:
                return
            self._datasets_done.add(key)
            built = self._worlds.get(key[1:])
        if built is not None:
            self.probes.release(key[0], str(built[0].parquet_dir))

    def probes_in_use(self, scenario: Scenario) -> contextlib.AbstractContextManager[None]:
        """Held while a trial of `scenario` runs: its dataset's probes are not closed."""
        spec, files = store_spec(scenario, self.options.store), self.dataset(scenario)[0]
        return self.probes.using(spec, str(files.parquet_dir))

    def stop_ahead(self) -> None:
        """No more probes built ahead; wait for one under way (the session is ending)."""
        with self._ahead:
            self._ahead_stopped = True

    def verify_data(self, scenario: Scenario) -> list[str]:
        """Problems with the scenario's pinned data files (acceptance fixtures), if any."""
        return world_for(scenario.dataset).verify(self.data_dir, scenario.dataset.snapshot)

    def reference(self, item: ScenarioItem) -> Mapping[str, Any]:
        """Evaluator-owned reference values; called only after the analyst has answered."""
        if item.manifest is not None:
            return manifest_reference(item.manifest, item.scenario.id)
        files, data_hash = self.dataset(item.scenario)
        world = self._worlds[(item.scenario.dataset.world, item.scenario.dataset.snapshot)][2]
        return world.reference(item.scenario, files, data_hash)
