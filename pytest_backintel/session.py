"""The plugin's state for one pytest process, kept under a `pytest.StashKey`."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_backintel import __version__, run_folder
from pytest_backintel.analyst_api import Analyst, AnalystConfig
from pytest_backintel.analysts import AnalystLoadError, analyst_label, load_analyst, spec_kind
from pytest_backintel.backends import StoreBackends, store_spec
from pytest_backintel.budget import RunBudget
from pytest_backintel.cassettes import case_key, write_cassette
from pytest_backintel.collect import ScenarioFailure, ScenarioItem
from pytest_backintel.freeze import (
    FreezeError,
    candidate_id,
    check_candidate,
    plan_items,
    register_run,
    verify_lock,
)
from pytest_backintel.html_report import RECORD_KEY, junit_properties
from pytest_backintel.item_python import ItemPython
from pytest_backintel.judging import check_judge, judge_trial
from pytest_backintel.manifests import manifest_reference
from pytest_backintel.method_hash import analyst_method_hash
from pytest_backintel.options import CALIBRATION_ANALYSTS, BenchOptions, read_options
from pytest_backintel.outcomes import Outcome
from pytest_backintel.records import (
    RecordWriter,
    git_state,
    merge_parts,
    new_run_id,
    now_iso,
    package_versions,
    read_json,
    write_json,
)
from pytest_backintel.sandbox.base import SandboxProvider, SandboxUnavailable
from pytest_backintel.sandbox.registry import (
    UnknownSandboxError,
    create_provider,
    load_provider_class,
)
from pytest_backintel.scenario import Scenario, Split
from pytest_backintel.streak import ProviderStreak
from pytest_backintel.trial import run_trial
from stores.base import DatasetFiles, ProvisionedStore, Store

if TYPE_CHECKING:
    from pytest_backintel.tracing import Tracing

__all__ = ["SESSION_KEY", "BenchSession"]


class BenchSession:
    """Options, the run folder, the analyst, the store backend and worlds for this process."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.options: BenchOptions = run_folder.replayed(read_options(config))
        check_judge(self.options.judge_model, self.options.model)
        self.root = config.rootpath
        workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
        self.worker = workerinput["workerid"] if workerinput else "main"
        self.is_controller = workerinput is None
        self.run_id: str = (workerinput or {}).get("backintel_run_id") or (
            self.options.run_id or new_run_id()
        )
        self.run_dir = (self.root / self.options.results_dir / self.run_id).resolve()
        self.writer = RecordWriter(self.run_dir, self.worker)
        self.outcomes: Counter[str] = Counter()
        self.records: list[dict[str, Any]] = []
        self._analyst: Analyst | None = None
        self.backends = StoreBackends(lambda: self.data_dir)
        self._sandboxes: SandboxProvider | None = None
        self._tracing: Tracing | None = None
        self.budget = RunBudget(self.run_dir, self.options.run_limits)
        self.streak = ProviderStreak(self.run_dir, self.options.max_provider_failures)
        self._header: dict[str, Any] = {}
        self._worlds: dict[tuple[str, str], tuple[DatasetFiles, str]] = {}
        self.reserved_cases: dict[str, set[str]] = {}
        """Every reserved case collected, per suite (a frozen run must take a suite whole)."""

    # -- lazily built, once per process --------------------------------------------------
    @property
    def analyst(self) -> Analyst:
        if self._analyst is None:
            opts = self.options
            self._analyst = load_analyst(
                opts.analyst,
                AnalystConfig(
                    model=opts.model, model_base_url=opts.model_base_url, limits=opts.limits
                ),
            )
        return self._analyst

    def store_for(self, scenario: Scenario) -> Store:
        """The backend the scenario runs on (`--store`, or the one its binding needs)."""
        return self.backends.get(store_spec(scenario, self.options.store))

    @property
    def sandboxes(self) -> SandboxProvider:
        """The sandbox backend for `run_python` and Python evidence (set up on first use)."""
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
        from pytest_backintel.tracing import Tracing

        self._tracing = self._tracing or Tracing(self.run_dir, self.worker)
        return self._tracing

    def item_python(self, store: ProvisionedStore) -> ItemPython | None:
        """Python for the item, when its store lives on disk for a sandbox to mount."""
        if store.mount_path is None:
            return None
        return ItemPython(self.sandboxes, store.mount_path)

    @property
    def data_dir(self) -> Path:
        from scenarios.worlds import data_dir

        return data_dir()

    def dataset(self, scenario: Scenario) -> tuple[DatasetFiles, str]:
        """The built files of a scenario's world and their data hash (built once, locked)."""
        key = (scenario.dataset.world, scenario.dataset.snapshot)
        if key not in self._worlds:
            from scenarios.worlds import get_world

            world = get_world(key[0])
            files = world.ensure_built(self.data_dir, snapshot=key[1])
            self._worlds[key] = (files, world.data_hash(files))
        return self._worlds[key]

    def verify_data(self, scenario: Scenario) -> list[str]:
        """Problems with the scenario's pinned data files (acceptance fixtures), if any."""
        from scenarios.worlds import get_world

        world = get_world(scenario.dataset.world)
        return world.verify(self.data_dir, scenario.dataset.snapshot)

    def reference(self, item: ScenarioItem) -> Mapping[str, Any]:
        """Evaluator-owned reference values; called only after the analyst has answered."""
        if item.manifest is not None:
            return manifest_reference(item.manifest, item.scenario.id)
        from scenarios.references import computed_reference, reference_for
        from scenarios.worlds import get_world

        files, data_hash = self.dataset(item.scenario)
        world = get_world(item.scenario.dataset.world)
        if world.name != item.scenario.dataset.world:  # e.g. `olist` served by the real release
            return computed_reference(item.scenario, world, files)
        return reference_for(item.scenario, data_hash)

    # -- terminal ---------------------------------------------------------------------------
    def sandbox_description(self) -> dict[str, Any]:
        try:
            cls = load_provider_class(self.options.sandbox)
        except UnknownSandboxError as exc:
            raise pytest.UsageError(str(exc)) from exc
        return {"backend": self.options.sandbox, "unsafe": cls.unsafe, "warning": cls.warning}

    def prepare_items(self, items: list[pytest.Item]) -> None:
        """Fail fast on a bad analyst; keep reserved scenarios out of unfrozen runs."""
        scenario_items = [i for i in items if isinstance(i, ScenarioItem)]
        if not scenario_items:
            return
        self.check_analyst()
        if not self.config.option.collectonly:
            run_folder.preflight(self.analyst, self.options, lambda: self.sandboxes)
            if self.is_controller and not (self.run_dir / "run.json").exists():
                write_json(self.run_dir / "run.json", self._header)
        reserved = [i for i in scenario_items if i.scenario.split is Split.RESERVED]
        if not self.options.freeze:
            for item in reserved:
                item.add_marker(
                    pytest.mark.skip(
                        reason="reserved scenarios run only in a frozen run (--freeze)"
                    )
                )
            return
        candidate = self.candidate()
        entry = {
            "run_id": self.run_id,
            "candidate_id": candidate_id(candidate),
            "candidate": candidate,
        }
        selected = [(i.suite, i.scenario.id, i.nodeid) for i in reserved]
        manifests = [i.manifest for i in scenario_items if i.manifest is not None]
        try:
            plan_items(self.run_dir, entry, selected, self.reserved_cases, manifests)
        except FreezeError as exc:
            raise pytest.UsageError(str(exc)) from exc

    def check_analyst(self, model: bool = False) -> None:
        """Load the analyst (a usage error if bad); with `model` check its model too."""
        try:
            self.analyst  # noqa: B018
        except AnalystLoadError as exc:
            raise pytest.UsageError(str(exc)) from exc
        if model:
            run_folder.preflight(self.analyst, self.options, lambda: None)

    # -- items ----------------------------------------------------------------------------
    def run_item(
        self, item: ScenarioItem, store: ProvisionedStore, python: ItemPython | None
    ) -> None:
        """Run one trial in its trace span (unless the run budget is spent), write its record
        and cassette, attach JUnit properties, fail unless it passed."""
        key, scenario = case_key(item.scenario.id, item.trial), item.scenario
        with self.tracing.trial(item.nodeid, key) as span:
            result = (
                self.streak.gate(scenario, item.trial, store.display_id)
                or self.budget.gate(scenario, item.trial, store.display_id)
            ) or run_trial(
                scenario,
                item.trial,
                store,
                self.analyst,
                self.budget.cap(self.options.limits),
                lambda _scenario: self.reference(item),
                python=python,
                dialect=self.store_for(item.scenario).dialect,
                verify_data=lambda: self.verify_data(scenario),
                case_key=key,
            )
            span.finish(result.score.outcome.value)
        cost = self.budget.settle(self.analyst.kind, self.options.model, result.run)
        self.streak.settle(result.score.outcome)
        if self.options.record:
            write_cassette(self.run_dir, key, result.run)
        judge = judge_trial(self.options.judge_model, self.options.model, scenario, result.run)
        extra = {"trace_id": span.trace_id, "cost_usd": cost, "case_key": key, "judge": judge}
        self.write_record(item, result.score.outcome.value, result.to_record() | extra)
        if result.score.outcome is Outcome.NOT_RUN:
            pytest.skip(result.score.reasons[0].message if result.score.reasons else "not run")
        if not result.score.outcome.passed:
            raise ScenarioFailure(result)

    def write_record(self, item: ScenarioItem, outcome: str, body: dict[str, Any]) -> None:
        scenario = item.scenario
        files_hash = self._worlds.get((scenario.dataset.world, scenario.dataset.snapshot))
        record: dict[str, Any] = {
            "run_id": self.run_id,
            "nodeid": item.nodeid,
            "worker": self.worker,
            "recorded_at": now_iso(),
            "scenario_id": scenario.id,
            "scenario_version": scenario.version,
            "scenario_sha": item.scenario_sha,
            "suite": item.suite,
            "trial": item.trial,
            "split": scenario.split.value,
            "level": scenario.level,
            "family": scenario.family,
            "answerable": scenario.answerable,
            "world": scenario.dataset.world,
            "snapshot": scenario.dataset.snapshot,
            "data_hash": files_hash[1] if files_hash else None,
            "backend": store_spec(scenario, self.options.store),
            "analyst": {
                "name": self._analyst.name if self._analyst else self.options.analyst,
                "kind": self._analyst.kind if self._analyst else None,
            },
            "model": self.options.model,
            "outcome": outcome,
            "trace_id": None,
            "cost_usd": None,
        } | body
        self.writer.write(record)
        self.outcomes[outcome] += 1
        item.user_properties += junit_properties(record)
        item.stash[RECORD_KEY] = record

    def record_infra_error(self, item: ScenarioItem, exc: BaseException) -> None:
        """A store or harness failure before the analyst ran: recorded, then re-raised."""
        message = f"{type(exc).__name__}: {exc}"
        self.write_record(
            item,
            Outcome.INFRA_ERROR.value,
            {"reasons": [{"outcome": "infra_error", "message": message, "metric": None}]},
        )

    # -- run folder ------------------------------------------------------------------------
    def run_header(self) -> dict[str, Any]:
        opts = self.options
        calibration = opts.analyst in CALIBRATION_ANALYSTS
        return {
            "run_id": self.run_id,
            "started_at": now_iso(),
            "harness_version": __version__,
            "analyst": {
                "spec": opts.analyst,
                "calibration": calibration,
                "kind": spec_kind(opts.analyst),
                "label": analyst_label(opts.analyst) or "model under test",
            },
            "model": opts.model,
            "model_base_url": opts.model_base_url,
            "model_api": run_folder.model_api_of(opts),
            "store_backend": opts.store,
            "sandbox": self.sandbox_description(),
            "trials": opts.trials,
            "limits": vars(opts.limits) | {},
            "run_limits": vars(opts.run_limits) | {},
            "record": opts.record,
            "freeze": None,
            "git": git_state(self.root),
            "method_hash": analyst_method_hash(self.options),
            "packages": package_versions(),
            "args": list(self.config.invocation_params.args),
        }

    def candidate(self) -> dict[str, Any]:
        """What a frozen run measures: the commit, the method, the analyst and its settings."""
        opts = self.options
        return {
            "git_sha": git_state(self.root)["sha"],
            "method_hash": analyst_method_hash(self.options),
            "analyst": opts.analyst,
            "model": opts.model,
            "model_base_url": opts.model_base_url,
            "limits": vars(opts.limits),
            "harness_version": __version__,
            "store_backend": opts.store,
        }

    def start(self) -> None:
        if not self.is_controller:
            return
        if self.config.pluginmanager.has_plugin("dsession") and self.options.analyst != "reference":
            self.check_analyst(model=not self.config.option.collectonly)
        header = self._header = self.run_header()
        header["appended_to"] = run_folder.check_run_folder(self.run_dir, self.options.append_run)
        if self.options.freeze:
            try:
                check_candidate(header["git"])
                header["freeze"] = register_run(
                    self.root / self.options.results_dir,
                    self.run_id,
                    self.candidate(),
                    self.options.freeze_plan,
                )
            except FreezeError as exc:
                raise pytest.UsageError(str(exc)) from exc
            write_json(self.run_dir / "run.json", header)
        if self.budget.path.exists() and not self.options.append_run:
            self.budget.reset()

    def finish(self, exitstatus: int) -> None:
        self.writer.close()
        if self._tracing is not None:
            self._tracing.close()
        self.backends.teardown()
        if self._sandboxes is not None:
            self._sandboxes.teardown_session()
        if not self.is_controller or not self.run_dir.exists():
            return
        from pytest_backintel.tracing import merge_traces

        records = merge_parts(self.run_dir) if (self.run_dir / "parts").exists() else []
        earlier = read_json(self.run_dir / "run.json")
        header = self.run_header() | self._header | earlier | run_folder.records_summary(records)
        if self.options.append_run and earlier.get("started_at") != self._header["started_at"]:
            header["appended"] = [*earlier.get("appended", []), self._header["appended_to"]]
        header.update(
            {
                "finished_at": now_iso(),
                "exit_status": exitstatus,
                "freeze_check": verify_lock(self.run_dir),
                "spans": merge_traces(self.run_dir),
                "budget_spent": self.budget.totals() if self.budget.limits.active else None,
            }
        )
        write_json(self.run_dir / "run.json", header)
        self.outcomes = Counter(r["outcome"] for r in records)
        self.records = records


SESSION_KEY = pytest.StashKey[BenchSession]()
