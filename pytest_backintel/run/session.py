"""The plugin's state for one pytest process, kept under a `pytest.StashKey`."""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_backintel.analyst_api import Analyst, AnalystConfig
from pytest_backintel.collect.backends import StoreBackends, backend_for, store_spec
from pytest_backintel.collect.items import ScenarioItem, suites_of
from pytest_backintel.collect.manifests import manifest_reference
from pytest_backintel.collect.sealed import SealedCase, SealedSuiteError, guard_reserved, refuse
from pytest_backintel.collect.suites import rebound
from pytest_backintel.collect.user_data import check_name, user_source, world_for
from pytest_backintel.collect.worlds import World, data_dir
from pytest_backintel.evidence.item_python import ItemPython, evidence_runner
from pytest_backintel.evidence.prediction import Check, shuffled_copy
from pytest_backintel.evidence.probe import DataProbe, Probes
from pytest_backintel.freeze.lock import (
    FreezeError,
    candidate_id,
    check_candidate,
    lock_plan,
    register_run,
    verify_lock,
)
from pytest_backintel.options import BenchOptions, read_options, spec_kind
from pytest_backintel.outcomes import Outcome
from pytest_backintel.records import run_folder
from pytest_backintel.records.cassettes import case_key, write_cassette, write_exchanges
from pytest_backintel.records.html_report import RECORD_KEY, junit_properties
from pytest_backintel.records.interrupted import counts_in_pytest, mark_unreported, part_lengths
from pytest_backintel.records.live import LIVE
from pytest_backintel.records.matrix_folder import write_matrix
from pytest_backintel.records.power import resolve_trials
from pytest_backintel.records.writer import (
    RecordWriter,
    merge_parts,
    new_run_id,
    trial_record,
    write_json,
)
from pytest_backintel.run._compat import upcoming_items
from pytest_backintel.run.analysts import AnalystLoadError, load_analyst
from pytest_backintel.run.budget import RunBudget
from pytest_backintel.run.cleanup import clean_stale_in_background, remove_folder
from pytest_backintel.run.failure import ScenarioFailure
from pytest_backintel.run.matrix import ModelMatrix, analysts_of, cassette_folder, models_of
from pytest_backintel.run.pipeline import LOOKAHEAD, TrialPipeline, trials_in_flight
from pytest_backintel.run.resume import Resumption
from pytest_backintel.run.scoped_python import ScopedPython, item_files, scopeable
from pytest_backintel.run.shards import select_shard
from pytest_backintel.run.streak import ProviderStreak
from pytest_backintel.run.suite_run import suite_analyst
from pytest_backintel.run.trial import TrialResult, run_trial
from pytest_backintel.run.worker_death import die_with_controller
from pytest_backintel.run.world_builds import WorldBuilds, world_label, worlds_wanted
from pytest_backintel.sandbox.base import SandboxProvider, SandboxUnavailable
from pytest_backintel.sandbox.registry import (
    UnknownSandboxError,
    create_provider,
    load_provider_class,
)
from pytest_backintel.sandbox.seed import SANDBOX_SEED
from pytest_backintel.scenario import Scenario
from pytest_backintel.scoring.judging import judge_trial
from stores.base import DatasetFiles, ProvisionedStore, Store

if TYPE_CHECKING:
    from pytest_backintel.records.tracing import Tracing

__all__ = ["SESSION_KEY", "BenchSession"]


class BenchSession:
    """Options, the run folder, the analyst, the store backend and worlds for this process."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
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
        self._sandboxes: SandboxProvider | None = None
        self._tracing: Tracing | None = None
        self._sweep: threading.Thread | None = None
        self.model_called = threading.Event()
        """Set when this process's first model request starts (or at the session's end): work
        that can wait (the PostgreSQL sweep, building the probes) waits for it, so under one
        GIL it does not delay that request."""
        LIVE.on_request = self.model_called.set
        self.budget = RunBudget(self.run_dir, self.options.run_limits)
        self.streak = ProviderStreak(self.run_dir, self.options.max_provider_failures)
        self._header: dict[str, Any] = {}
        self._worlds: dict[tuple[str, str], tuple[DatasetFiles, str, World]] = {}
        self.worlds_ahead: WorldBuilds[tuple[str, str], tuple[DatasetFiles, str, World]]
        self.worlds_ahead = WorldBuilds()
        LIVE.side_work = self.worlds_ahead.building
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
        return ItemPython(self.sandboxes, store.mount_path, store.connect)

    def provision(self, scenario: Scenario) -> ProvisionedStore:
        """The item's store (with the scope's denied grants withheld)."""
        backend = self.store_for(scenario)
        return backend.provision(item_files(self.dataset(scenario)[0], scenario.scope, backend))

    def probes_for(
        self, scenario: Scenario, with_python: bool, *, warm: bool = False
    ) -> list[DataProbe]:
        """The data probes of the scenario's dataset on its backend (built once, shared by
        concurrent trials); `warm` only starts building them in the background."""
        python = evidence_runner(lambda: self.sandboxes) if with_python else None
        spec, (files, data_hash) = store_spec(scenario, self.options.store), self.dataset(scenario)
        if warm:
            store, after = self.store_for(scenario), self.model_called.wait
            self.probes.warm(spec, store, files, python, data_hash, after)
            return []
        return self.probes.get(spec, self.store_for(scenario), files, python, data_hash)

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
        return built[:2]

    def _build_world(self, scenario: Scenario) -> tuple[DatasetFiles, str, World]:
        key = (scenario.dataset.world, scenario.dataset.snapshot)
        with self._lock:
            world = world_for(scenario.dataset)
        files = world.ensure_built(self.data_dir, snapshot=key[1])
        built = self._worlds[key] = (files, world.data_hash(files), world)
        return built

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

    # -- terminal ---------------------------------------------------------------------------
    def sandbox_description(self) -> dict[str, Any]:
        try:
            cls = load_provider_class(self.options.sandbox)
        except UnknownSandboxError as exc:
            raise pytest.UsageError(str(exc)) from exc
        return {
            "backend": self.options.sandbox,
            "unsafe": cls.unsafe,
            "warning": cls.warning,
            "seed": SANDBOX_SEED,  # every sandboxed run's (`pytest_backintel.sandbox.seed`)
        }

    def prepare_items(self, items: list[pytest.Item]) -> None:
        """Fail fast on a bad analyst; keep reserved scenarios out of unfrozen runs."""
        scenario_items = [i for i in items if isinstance(i, ScenarioItem | SealedCase)]
        if not scenario_items:
            return
        collect_only = self.config.option.collectonly
        if not (collect_only and spec_kind(self.options.analyst) in ("calibration", "model")):
            self.check_analyst()  # a built-in analyst is loaded only when items will run
        if not collect_only:
            for analyst, opts in analysts_of(self):
                run_folder.preflight(analyst, opts, lambda: self.sandboxes)
            self._header["suites"] = suites_of(scenario_items)
            if self.is_controller and not (self.run_dir / "run.json").exists():
                write_json(self.run_dir / "run.json", self._header)
        self.start_pipeline()
        if not self.options.freeze:
            self.reserved_note = guard_reserved(self.config, items)
        else:
            candidate = self.candidate()
            entry: dict[str, Any] = {"run_id": self.run_id, "candidate": candidate}
            entry["candidate_id"] = candidate_id(candidate)
            try:
                lock_plan(self.run_dir, entry, items, self.reserved_cases, self.data_dir)
            except (FreezeError, SealedSuiteError) as exc:
                refuse(self.config, items, str(exc))
        self.select_trials(items)

    def select_trials(self, items: list[pytest.Item]) -> None:
        """A resumed run keeps the trials left to run; a shard its part; then the plan."""
        opts = self.options
        if self.resumption is not None:  # the run's plan is already written
            self.reserved_note.append(self.resumption.select(self.config, items, self.data_hash_of))
            return
        if opts.shard is not None:
            select_shard(self.config, items, opts.shard, opts.shard_durations, self.run_dir)
        run_folder.write_plan(self.run_dir, self.worker, items, self.config.option.collectonly)
        if not self.config.option.collectonly:  # built ahead, while items that need none run
            self.worlds_ahead.prefetch(worlds_wanted(items, self._build_world))

    def data_hash_of(self, item: ScenarioItem) -> tuple[str, str, str]:
        """(world, snapshot, data hash) of the item's dataset (built once)."""
        dataset = item.scenario.dataset
        return dataset.world, dataset.snapshot, self.dataset(item.scenario)[1]

    def start_pipeline(self) -> None:
        """With `--concurrency` above 1 (or `auto` for a model analyst), trials run ahead."""
        if self.config.option.collectonly:
            return
        size = self.concurrency * (self.matrix.providers if self.matrix else 1)
        if size > 1 and self.pipeline is None:
            self.tracing.start()  # instrument agents once, before any worker thread runs one
            self.pipeline = TrialPipeline(size, self.prepare_trial)

    @property
    def concurrency(self) -> int:
        opts = self.options
        return trials_in_flight(opts.concurrency, self.analyst.kind, opts.max_connections)

    def check_analyst(self, model: bool = False) -> None:
        """Load the analyst (a usage error if bad); with `model` check its model too."""
        try:
            loaded = analysts_of(self)
        except AnalystLoadError as exc:
            given = self.options.analyst_from  # a suite file's `analyst:` says where it is
            where = f"{given[0]}:{given[1]}: analyst (from the suite file): " if given else ""
            raise pytest.UsageError(f"{where}{exc}") from exc
        for analyst, opts in loaded if model else []:
            run_folder.preflight(analyst, opts, lambda: None)

    # -- items ----------------------------------------------------------------------------
    def run_item(
        self,
        item: ScenarioItem,
        store: ProvisionedStore | None,
        python: ItemPython | ScopedPython | None,
    ) -> None:
        """Run one trial (or, with `--concurrency`, take the one prepared ahead for this item),
        then report it: record, cassette, JUnit properties; fail unless it passed."""
        if self.pipeline is None:
            assert store is not None, "a serial item has its store from the fixture"
            result, trace_id = self.execute(item, store, python)
        else:
            limit = self.pipeline.size * LOOKAHEAD
            self.pipeline.ensure_started(upcoming_items(self.config, item, limit))
            prepared = self.pipeline.take(item)
            if prepared.error is not None:  # the store or sandbox failed before the trial
                self.record_infra_error(item, prepared.error)
                raise prepared.error
            assert prepared.result is not None
            result, trace_id = prepared.result
        self.report(item, result, trace_id)

    def execute(
        self,
        item: ScenarioItem,
        store: ProvisionedStore,
        python: ItemPython | ScopedPython | None,
    ) -> tuple[TrialResult, str | None]:
        """One trial in its trace span, unless the run budget is spent: (result, trace id)."""
        key, scenario = case_key(item.scenario.id, item.trial), item.scenario
        if self.analyst.kind == "model":  # the probes are built while the model thinks
            self.probes_for(scenario, python is not None, warm=True)
        with self.tracing.trial(item.nodeid, key) as span:
            result = (
                self.streak.gate(scenario, item.trial, store.display_id)
                or self.budget.gate(scenario, item.trial, store.display_id)
            ) or run_trial(
                scenario,
                item.trial,
                store,
                self.matrix.analyst(item.model) if self.matrix else self.analyst,
                self.budget.cap(self.options.limits),
                lambda _scenario: self.reference(item),
                python=python,
                dialect=self.store_for(item.scenario).dialect,
                verify_data=lambda: self.verify_data(scenario),
                case_key=key,
                probes=lambda: self.probes_for(scenario, python is not None),
                permuted=lambda check: (
                    self.permuted_python(scenario, check) if python is not None else None
                ),
            )
            span.finish(result.score.outcome.value)
        return result, span.trace_id

    def prepare_trial(self, item: ScenarioItem) -> tuple[TrialResult, str | None]:
        """A whole trial off pytest's thread: its own store and sandbox, run, torn down.
        Stores and sandboxes are set up in turn (`_setup_gate`), so the first trial's analyst
        starts after one setup, not after every trial in flight has done its own."""
        with self._setup_gate:
            store = self.provision(item.scenario)
            try:
                python = self.item_python(store, item.scenario)
            except BaseException:
                store.teardown()
                raise
        try:
            try:
                return self.execute(item, store, python)
            finally:
                if python is not None:
                    python.close()
        finally:
            store.teardown()

    def report(self, item: ScenarioItem, result: TrialResult, trace_id: str | None) -> None:
        """Settle the budget, write the record and cassette; fail unless the trial passed."""
        key, scenario = case_key(item.scenario.id, item.trial), item.scenario
        model, folder = item.model or self.options.model, cassette_folder(self, item)
        cost = self.budget.settle(self.analyst.kind, model, result.run)
        self.streak.settle(result.score.outcome)
        if self.options.record:
            write_cassette(folder, key, result.run)
            if result.run is not None and result.run.observed is not None:  # an external agent
                write_exchanges(folder, key, result.run.observed.get("exchanges") or [])
        judge = judge_trial(self.options.judge_model, model, scenario, result.run)
        extra = {"trace_id": trace_id, "cost_usd": cost, "case_key": key, "judge": judge}
        self.write_record(item, result.score.outcome.value, result.to_record() | extra)
        if result.score.outcome is Outcome.NOT_RUN:
            pytest.skip(result.score.reasons[0].message if result.score.reasons else "not run")
        if not result.score.outcome.passed:
            raise ScenarioFailure(result)

    def count_report(self, report: pytest.TestReport) -> None:
        """Note an item pytest counts (`pytest_runtest_logreport`)."""
        if counts_in_pytest(report.when or "", report.passed):
            self.reported.add(report.nodeid)

    def write_record(self, item: ScenarioItem, outcome: str, body: dict[str, Any]) -> None:
        dataset = item.scenario.dataset
        analyst = self.matrix.analyst(item.model) if self.matrix else self._analyst
        files_hash = self._worlds.get((dataset.world, dataset.snapshot))
        model = item.model or self.options.model
        where = {"run_id": self.run_id, "worker": self.worker, "model": model}
        name, kind = (analyst.name, analyst.kind) if analyst else (self.options.analyst, None)
        where["analyst"] = {"name": name, "kind": kind}
        where["data_hash"] = files_hash[1] if files_hash else None
        method = getattr(files_hash[2], "fingerprint_method", None) if files_hash else None
        where["data_hash_method"] = method
        backend = store_spec(item.scenario, self.options.store)
        record = trial_record(item, outcome, where, backend) | body
        if self.resumption is not None:  # a trial run again keeps its earlier attempts
            record |= self.resumption.attempt(item.nodeid)
        self.writer.write(record)
        self.outcomes[outcome] += 1
        item.user_properties += junit_properties(record)
        item.stash[RECORD_KEY] = record

    def record_infra_error(self, item: ScenarioItem, exc: BaseException) -> None:
        """A store or harness failure before the analyst ran: recorded, then re-raised."""
        reason = {
            "outcome": "infra_error",
            "message": f"{type(exc).__name__}: {exc}",
            "metric": None,
        }
        self.write_record(item, Outcome.INFRA_ERROR.value, {"reasons": [reason]})

    # -- run folder ------------------------------------------------------------------------
    def run_header(self) -> dict[str, Any]:
        args, sandbox = list(self.config.invocation_params.args), self.sandbox_description()
        header = run_folder.run_header(self.options, self.root, self.run_id, sandbox, args)
        if self.matrix is not None:
            header["matrix"] = self.matrix.header()
        return header | {"datasets": rebound()}  # `--dataset` rebindings, paths resolved

    def candidate(self) -> dict[str, Any]:
        return run_folder.candidate(self.options, self.root)  # what a frozen run measures

    def start(self) -> None:
        if not self.is_controller:
            return
        in_process = spec_kind(self.options.analyst) == "model" and not (
            self.config.option.collectonly or self.config.pluginmanager.has_plugin("dsession")
        )  # this process sends model requests: the sweep waits for the first
        after = self.model_called.wait if in_process else None
        self._sweep = clean_stale_in_background(self.data_dir, after)  # what killed runs left
        self._parts_before = part_lengths(self.run_dir) if self.run_dir.exists() else {}
        if self.config.pluginmanager.has_plugin("dsession") and self.options.analyst != "reference":
            self.check_analyst(model=not self.config.option.collectonly)
        header = self._header = self.run_header()
        opts, resumed = self.options, self.resumption
        if resumed is not None:
            resumed.begin(header, opts.shard, opts.freeze, candidate_id(self.candidate()))
            self.streak.path.unlink(missing_ok=True)  # a provider streak stops one session
        else:
            header["appended_to"] = run_folder.check_run_folder(self.run_dir, opts.append_run)
        if opts.freeze:
            try:
                results, baseline = self.root / self.options.results_dir, opts.freeze_baseline
                diff = check_candidate(header["git"], self.root, results, baseline)
                if resumed is None:
                    shard = "{}/{}".format(*opts.shard) if opts.shard else None
                    header["freeze"] = register_run(
                        results, self.run_id, self.candidate(), opts.freeze_plan, diff, shard
                    )
            except FreezeError as exc:
                raise pytest.UsageError(str(exc)) from exc
            if resumed is None:
                write_json(self.run_dir / "run.json", header)
        if self.budget.path.exists() and not (opts.append_run or resumed):
            self.budget.reset()  # a resumed run's budget is the whole run's

    def finish(self, exitstatus: int) -> None:
        self.model_called.set()  # what waited for a request that never came runs now
        if LIVE.on_request == self.model_called.set:
            LIVE.on_request = None
        if self.pipeline is not None:  # trials started ahead of an interrupted run clean up
            self.pipeline.close()
        self.writer.close()
        if self._tracing is not None:
            self._tracing.close()
        self.probes.teardown()
        for folder in self.backends.teardown():
            remove_folder(folder)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        for change in self.backends.changes:
            if reporter is not None:
                reporter.write_line(f"backintel: WARNING: {change}")
        if self._sweep is not None:
            self._sweep.join()
        if self._sandboxes is not None:
            self._sandboxes.teardown_session()
        remove_folder(self.data_dir / "sandbox" / f"{os.getpid()}")  # also after Ctrl-C
        if not self.is_controller or not self.run_dir.exists():
            return
        if exitstatus == pytest.ExitCode.INTERRUPTED:  # records pytest never counted
            mark_unreported(self.run_dir, self.reported, self._parts_before)
        records = merge_parts(self.run_dir) if any(self.run_dir.glob("parts/records-*")) else []
        header = run_folder.final_header(
            self.run_dir,
            self.run_header() | self._header,
            records,
            exit_status=exitstatus,
            append_run=self.options.append_run,
            budget_spent=self.budget.totals() if self.budget.limits.active else None,
            freeze_check=verify_lock(self.run_dir),
        )
        if self.backends.changes:
            header["warnings"] = [*header.get("warnings", []), *self.backends.changes]
            header["source_changes"] = list(self.backends.changes)
        write_json(self.run_dir / "run.json", header)
        self.outcomes = Counter(r["outcome"] for r in records)
        self.records = records
        if self.matrix is not None:
            write_matrix(self.run_dir, header, records)


SESSION_KEY = pytest.StashKey[BenchSession]()
