"""Running an item's trial, serially or prepared ahead in the pipeline, and reporting it:
the budget and streak settled, the record, cassette and JUnit properties written."""

from __future__ import annotations

import os
from typing import Any

import pytest

from pytest_backintel.collect.backends import store_spec
from pytest_backintel.collect.items import ScenarioItem
from pytest_backintel.evidence.item_python import ItemPython
from pytest_backintel.outcomes import Outcome
from pytest_backintel.records.cassettes import case_key, write_cassette, write_exchanges
from pytest_backintel.records.html_report import RECORD_KEY, junit_properties
from pytest_backintel.records.interrupted import counts_in_pytest
from pytest_backintel.records.writer import trial_record
from pytest_backintel.run._compat import upcoming_items
from pytest_backintel.run.failure import ScenarioFailure
from pytest_backintel.run.matrix import cassette_folder
from pytest_backintel.run.pipeline import UPCOMING, TrialPipeline, trials_in_flight
from pytest_backintel.run.scoped_python import ScopedPython
from pytest_backintel.run.session_data import SessionData
from pytest_backintel.run.trial import TrialResult, run_trial
from pytest_backintel.scoring.judging import judge_trial
from stores.base import ProvisionedStore

__all__ = ["SessionTrials"]


class SessionTrials(SessionData):
    """Trials of this process: run, prepared ahead, recorded."""

    def start_pipeline(self) -> None:
        """With `--concurrency` above 1 (or `auto` for a model analyst), trials run ahead."""
        if self.config.option.collectonly:
            return
        size = self.concurrency * (self.matrix.providers if self.matrix else 1)
        if size > 1 and self.pipeline is None:
            self.tracing.start()  # instrument agents once, before any worker thread runs one
            lanes = self.lanes if self.options.concurrency is None else None
            self.pipeline = TrialPipeline(
                size, self.prepare_trial, self.world_build_under_way, lanes
            )
            self.worlds_ahead.on_change.append(self.pipeline.top_up)

    def lanes(self) -> int:
        """Trials run at once under `auto`: a calibration analyst's trials are CPU work, so
        one core is left to a world built ahead while it is built (a model's wait on it)."""
        assert self.pipeline is not None
        size = self.pipeline.size
        busy = self.analyst.kind == "calibration" and self.worlds_ahead.working_ahead()
        return size - 1 if busy else size

    @property
    def concurrency(self) -> int:
        opts = self.options
        cores = 1 if hasattr(self.config, "workerinput") else os.cpu_count() or 1
        return trials_in_flight(opts.concurrency, self.analyst.kind, opts.max_connections, cores)

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
            limit = self.pipeline.size * UPCOMING
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
        """One trial in its trace span, unless the run budget is spent: (result, trace id);
        its dataset's probes held meanwhile (`probes_in_use`)."""
        key, scenario = case_key(item.scenario.id, item.trial), item.scenario
        if self.analyst.kind == "model":  # the probes are built while the model thinks
            self.probes_for(scenario, python is not None, warm=True)
        with self.probes_in_use(scenario), self.tracing.trial(item.nodeid, key) as span:
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
                probes=lambda: self.probes_for(
                    scenario, python is not None, reference=lambda: self.reference(item)
                ),
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
            self.item_reported.set()

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
