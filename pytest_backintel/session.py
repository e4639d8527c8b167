"""The plugin's state for one pytest process, kept under a `pytest.StashKey`."""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_backintel import __version__
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
    lock_plan,
    register_run,
    verify_lock,
)
from pytest_backintel.html_report import RECORD_KEY, junit_properties
from pytest_backintel.item_python import ItemPython
from pytest_backintel.judging import check_judge, judge_trial
from pytest_backintel.manifests import manifest_reference
from pytest_backintel.options import CALIBRATION_ANALYSTS, BenchOptions, read_options
from pytest_backintel.outcomes import Outcome
from pytest_backintel.records import (
    RecordWriter,
    git_state,
    hash_files,
    merge_parts,
    new_run_id,
    now_iso,
    package_versions,
    write_json,
)
from pytest_backintel.sandbox.base import SandboxProvider
from pytest_backintel.sandbox.registry import (
    UnknownSandboxError,
    create_provider,
    load_provider_class,
)
from pytest_backintel.scenario import Scenario
from pytest_backintel.sealed import SealedCase, SealedSuiteError, guard_reserved, refuse
from pytest_backintel.trial import run_trial
from stores.base import DatasetFiles, ProvisionedStore, Store

if TYPE_CHECKING:
    from pytest_backintel.tracing import Tracing

__all__ = ["SESSION_KEY", "BenchSession"]


class BenchSession:
    """Options, the run folder, the analyst, the store backend and worlds for this process."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.options: BenchOptions = read_options(config)
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
        self._analyst: Analyst | None = None
        self.backends = StoreBackends(lambda: self.data_dir)
        self._sandboxes: SandboxProvider | None = None
        self._tracing: Tracing | None = None
        self.budget = RunBudget(self.run_dir, self.options.run_limits)
        self._worlds: dict[tuple[str, str], tuple[DatasetFiles, str]] = {}
        self.reserved_cases: dict[str, set[str]] = {}
        """Every reserved case collected, per suite (a frozen run must take a suite whole)."""
        self.reserved_note: list[str] = []
        """The line saying reserved items were deselected from an unfrozen run."""

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
            except UnknownSandboxError as exc:
                raise pytest.UsageError(str(exc)) from exc
            provider.setup_session()
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
        scenario_items = [i for i in items if isinstance(i, ScenarioItem | SealedCase)]
        if not scenario_items:
            return
        try:
            self.analyst  # noqa: B018 - load once, report a bad --analyst as a usage error
        except AnalystLoadError as exc:
            raise pytest.UsageError(str(exc)) from exc
        if not self.options.freeze:
            self.reserved_note = guard_reserved(self.config, items)
            return
        candidate = self.candidate()
        entry: dict[str, Any] = {"run_id": self.run_id, "candidate": candidate}
        entry["candidate_id"] = candidate_id(candidate)
        try:
            lock_plan(self.run_dir, entry, items, self.reserved_cases, self.data_dir)
        except (FreezeError, SealedSuiteError) as exc:
            refuse(self.config, items, str(exc))

    # -- items ----------------------------------------------------------------------------
    def run_item(
        self, item: ScenarioItem, store: ProvisionedStore, python: ItemPython | None
    ) -> None:
        """Run one trial in its trace span (unless the run budget is spent), write its record
        and cassette, attach JUnit properties, fail unless it passed."""
        key, scenario = case_key(item.scenario.id, item.trial), item.scenario
        with self.tracing.trial(item.nodeid, key) as span:
            result = self.budget.gate(scenario, item.trial, store.display_id) or run_trial(
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
        if self.options.record:
            write_cassette(self.run_dir, key, result.run)
        judge = judge_trial(self.options.judge_model, self.options.model, scenario, result.run)
        extra = {"trace_id": span.trace_id, "cost_usd": cost, "case_key": key, "judge": judge}
        self.write_record(item, result.score.outcome.value, result.to_record() | extra)
        if result.score.outcome is Outcome.NOT_RUN:
            pytest.skip("not run")
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
    def method_hash(self) -> str | None:
        """Hash over the default analyst's prompt, skills and tool code."""
        spec = importlib.util.find_spec("analyst")
        if spec is None or not spec.submodule_search_locations:
            return None
        base = Path(next(iter(spec.submodule_search_locations)))
        files = [p for p in base.rglob("*") if p.suffix in {".py", ".md"} and p.is_file()]
        return hash_files(files, base)

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
            "store_backend": opts.store,
            "sandbox": self.sandbox_description(),
            "trials": opts.trials,
            "limits": vars(opts.limits) | {},
            "run_limits": vars(opts.run_limits) | {},
            "record": opts.record,
            "freeze": None,
            "git": git_state(self.root),
            "method_hash": self.method_hash(),
            "packages": package_versions(),
            "args": list(self.config.invocation_params.args),
        }

    def candidate(self) -> dict[str, Any]:
        """What a frozen run measures: the commit, the method, the analyst and its settings."""
        opts = self.options
        return {
            "git_sha": git_state(self.root)["sha"],
            "method_hash": self.method_hash(),
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
        header, opts = self.run_header(), self.options
        if opts.freeze:
            try:
                results, baseline = self.root / self.options.results_dir, opts.freeze_baseline
                diff = check_candidate(header["git"], self.root, results, baseline)
                header["freeze"] = register_run(
                    results, self.run_id, self.candidate(), opts.freeze_plan, diff
                )
            except FreezeError as exc:
                raise pytest.UsageError(str(exc)) from exc
        write_json(self.run_dir / "run.json", header)
        self.budget.reset()

    def finish(self, exitstatus: int) -> None:
        self.writer.close()
        if self._tracing is not None:
            self._tracing.close()
        self.backends.teardown()
        if self._sandboxes is not None:
            self._sandboxes.teardown_session()
        if not self.is_controller:
            return
        from pytest_backintel.tracing import merge_traces

        records = merge_parts(self.run_dir) if (self.run_dir / "parts").exists() else []
        header = self.run_header() | _read_json(self.run_dir / "run.json")
        scen = sorted({f"{r['scenario_id']}@{r.get('scenario_sha', '')}" for r in records})
        header.update(
            {
                "finished_at": now_iso(),
                "exit_status": exitstatus,
                "scenario_hash": hashlib.sha256("\n".join(scen).encode()).hexdigest(),
                "data_hashes": dict(
                    sorted({(r["world"], r["data_hash"]) for r in records if r.get("data_hash")})
                ),
                "outcomes": dict(sorted(Counter(r["outcome"] for r in records).items())),
                "trials_recorded": len(records),
                "freeze_check": verify_lock(self.run_dir),
                "spans": merge_traces(self.run_dir),
                "budget_spent": self.budget.totals() if self.budget.limits.active else None,
            }
        )
        write_json(self.run_dir / "run.json", header)
        self.outcomes = Counter(r["outcome"] for r in records)


def _read_json(path: Path) -> dict[str, Any]:
    import json

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


SESSION_KEY = pytest.StashKey[BenchSession]()
