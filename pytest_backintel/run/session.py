"""The plugin's state for one pytest process, kept under a `pytest.StashKey`."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest

from pytest_backintel.collect.items import ScenarioItem, suites_of
from pytest_backintel.collect.sealed import SealedCase, SealedSuiteError, guard_reserved, refuse
from pytest_backintel.collect.suites import rebound
from pytest_backintel.freeze.lock import (
    FreezeError,
    candidate_id,
    check_candidate,
    lock_plan,
    register_run,
    verify_lock,
)
from pytest_backintel.options import spec_kind
from pytest_backintel.records import run_folder
from pytest_backintel.records.interrupted import mark_unreported, part_lengths
from pytest_backintel.records.live import LIVE
from pytest_backintel.records.matrix_folder import write_matrix
from pytest_backintel.records.summary_imports import SUMMARY_MODULES, BackgroundImports
from pytest_backintel.records.writer import merge_parts, write_json
from pytest_backintel.run.analysts import AnalystLoadError
from pytest_backintel.run.cleanup import clean_stale_in_background, remove_folder
from pytest_backintel.run.matrix import analysts_of
from pytest_backintel.run.session_trials import SessionTrials
from pytest_backintel.run.shards import select_shard
from pytest_backintel.run.world_builds import worlds_wanted
from pytest_backintel.sandbox.registry import UnknownSandboxError, load_provider_class
from pytest_backintel.sandbox.seed import SANDBOX_SEED

__all__ = ["SESSION_KEY", "BenchSession"]


class BenchSession(SessionTrials):
    """Options, the run folder, the analyst, the store backend and worlds for this process:
    its state and what it builds (`session_data`), its trials (`session_trials`), and here
    the start and finish of the session, the items' preparation and the run header."""

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
            if self.summary_imports is not None:  # no summary: a test suite's session, whose
                self.summary_imports.cancel()  # tests' imports (pytester's) it must not race
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
            # a model's trials build their probes while it thinks; other analysts' right after
            # the world, in the same background thread
            kind = spec_kind(self.options.analyst)
            then = None if kind in ("model", "external") else self.probes_ahead
            wanted = worlds_wanted(items, self._build_world, self.world_build_cost, then)
            self.worlds_ahead.prefetch(wanted)

    def data_hash_of(self, item: ScenarioItem) -> tuple[str, str, str]:
        """(world, snapshot, data hash) of the item's dataset (built once)."""
        dataset = item.scenario.dataset
        return dataset.world, dataset.snapshot, self.dataset(item.scenario)[1]

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

    # -- run folder ------------------------------------------------------------------------
    def run_header(self) -> dict[str, Any]:
        args, sandbox = list(self.config.invocation_params.args), self.sandbox_description()
        header = run_folder.run_header(self.options, self.root, self.run_id, sandbox, args)
        if self.matrix is not None:
            header["matrix"] = self.matrix.header()
        return header | {"datasets": rebound()}  # `--dataset` rebindings, paths resolved

    def candidate(self) -> dict[str, Any]:
        return run_folder.candidate(self.options, self.root)  # what a frozen run measures

    def runs_model_trials(self) -> bool:
        """This process sends a model analyst's requests (not collecting only, not the xdist
        controller, whose workers send them)."""
        return spec_kind(self.options.analyst) == "model" and not (
            self.config.option.collectonly or self.config.pluginmanager.has_plugin("dsession")
        )

    def start(self) -> None:
        if not self.is_controller:
            return
        # this process sends model requests: the sweep waits for the first to return
        after = self.model_answered.wait if self.runs_model_trials() else None
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
        if not self.config.option.collectonly:  # the summary's libraries, before the end
            wait = after or self.item_reported.wait  # xdist, no model: after the first item
            self.summary_imports = BackgroundImports(SUMMARY_MODULES, wait)

    def finish(self, exitstatus: int) -> None:
        if self.summary_imports is not None and not self.run_dir.exists():
            self.summary_imports.cancel()  # no run folder: no summary to compute
        self.model_answered.set()  # what waited for a request that never came runs now
        self.item_reported.set()
        if LIVE.on_answer == self.model_answered.set:
            LIVE.on_answer = None
        if self.pipeline is not None:  # trials started ahead of an interrupted run clean up
            self.pipeline.close()
        self.stop_ahead()  # before the probes and backends are torn down
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
        if self.summary_imports is not None:  # one thread imports them, not two at once
            self.summary_imports.join()
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
