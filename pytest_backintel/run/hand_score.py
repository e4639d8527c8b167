"""Scoring an answer given by hand exactly as a trial scores it (`backintel score`).

The same bound store (a scenario's binding overrides `--store`), the same sandbox backend for
Python evidence, the same statement limits, the same data probe and the same reference. Stores
and probes are provisioned once per backend and dataset and reused for every answer scored by
one `HandScorer`, so a test can score many answers cheaply.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pytest_backintel.analyst_api import AnalystRun
from pytest_backintel.collect.backends import StoreBackends, backend_for, store_spec
from pytest_backintel.collect.manifests import manifest_reference
from pytest_backintel.collect.user_data import world_for
from pytest_backintel.contract import AnalystAnswer, Refusal, parse_answer
from pytest_backintel.evidence.item_python import evidence_runner
from pytest_backintel.evidence.prediction import CHECKS, Check, permutation_run, shuffled_copy
from pytest_backintel.evidence.probe import DataProbe, Probes, scenario_key
from pytest_backintel.evidence.probe_move_cache import world_seed
from pytest_backintel.evidence.probe_moves import moving_probes
from pytest_backintel.evidence.query_channel import SessionSource
from pytest_backintel.evidence.reexecute import EvidenceResult, reexecute
from pytest_backintel.run.cleanup import remove_folder
from pytest_backintel.run.scope import observed_reads
from pytest_backintel.sandbox.base import SandboxProvider
from pytest_backintel.sandbox.registry import create_provider
from pytest_backintel.scenario import Scenario
from pytest_backintel.scoring.prediction import score_prediction
from pytest_backintel.scoring.score import TrialScore, boundary_reasons, score_answer
from stores.base import DatasetFiles, ProvisionedStore
from stores.common.fingerprint_cache import use_folder

__all__ = ["SCORED", "HandScorer", "rescore_run"]


class HandScorer:
    """Scores answers for scenarios on `store` (the default backend spec) with `sandbox`."""

    def __init__(self, data_dir: Path, store: str = "sqlite", sandbox: str | None = None) -> None:
        self.data_dir = data_dir
        self.default_store = store
        self.sandbox_name = sandbox
        self.backends = StoreBackends(lambda: data_dir)
        self.probes = Probes(lambda: data_dir / "perturbed")
        use_folder(data_dir / "fingerprints")
        self.probe_gaps: list[str] = []
        """The tables the last answer's data probes kept whole, with why."""
        self.probe_unguarded: str | None = None
        """Why the last answer's evidence was not checked against moved data, if it was not."""
        self._sandboxes: SandboxProvider | None = None
        self._stores: dict[tuple[str, str], ProvisionedStore] = {}
        self._files: dict[tuple[str, str], tuple[DatasetFiles, str]] = {}

    def sandboxes(self) -> SandboxProvider:
        if self._sandboxes is None:
            workdir = self.data_dir / "sandbox" / f"score-{os.getpid()}"
            provider = create_provider(self.sandbox_name, workdir)
            provider.setup_session()
            self._sandboxes = provider
        return self._sandboxes

    def dataset(self, scenario: Scenario) -> tuple[DatasetFiles, str]:
        key = (scenario.dataset.world, scenario.dataset.snapshot)
        if key not in self._files:
            world = world_for(scenario.dataset)
            files = world.ensure_built(self.data_dir, snapshot=key[1])
            self._files[key] = (files, world.data_hash(files))
        return self._files[key]

    def _python(self, mount: Path | None, session: SessionSource | None = None) -> Any:
        return evidence_runner(self.sandboxes)(mount, session)

    def _permuted_python(self, scenario: Scenario, check: Check) -> Any:
        """Python evidence over the prediction dataset with its training labels permuted or its
        scoring features shuffled, as a trial re-runs it (`shuffled_copy`); None without a
        SQLite build."""
        files, data_hash = self.dataset(scenario)
        if scenario.prediction is None or files.sqlite_path is None:
            return None
        copy = shuffled_copy(
            files.sqlite_path, scenario.prediction, self.data_dir / "permuted", check, data_hash
        )
        return evidence_runner(self.sandboxes)(copy, None)

    def reference(self, scenario: Scenario, manifest: Path | None) -> Mapping[str, Any]:
        if not scenario.answerable:
            return {}
        if manifest is not None:
            return manifest_reference(manifest, scenario.id)
        files, data_hash = self.dataset(scenario)
        return world_for(scenario.dataset).reference(scenario, files, data_hash)

    def store(self, scenario: Scenario) -> tuple[ProvisionedStore, str]:
        """The scenario's store on its bound backend (provisioned once) and its SQL dialect."""
        spec = store_spec(scenario, self.default_store)
        backend = backend_for(self.backends, scenario, self.default_store)
        files, _ = self.dataset(scenario)
        key = (spec, str(files.parquet_dir))
        if key not in self._stores:
            self._stores[key] = backend.provision(files)
        return self._stores[key], backend.dialect

    def probes_for(self, scenario: Scenario, manifest: Path | None = None) -> list[DataProbe]:
        """The scenario's data probes, those that move its answer included (`probe_moves`)."""
        spec = store_spec(scenario, self.default_store)
        files, data_hash = self.dataset(scenario)
        backend = backend_for(self.backends, scenario, self.default_store)
        args = (spec, backend, files, self._python, data_hash, scenario)
        seed = world_seed(world_for(scenario.dataset), scenario.dataset.snapshot)
        return moving_probes(self.probes, *args, lambda: self.reference(scenario, manifest), seed)

    def unmoved(self, scenario: Scenario) -> str | None:
        """Why no data probe moves the scenario's answer, if none does."""
        probes = self.probes_for(scenario)
        return next((w for p in probes if (w := p.still.get(scenario_key(scenario)))), None)

    def score(
        self, scenario: Scenario, output: AnalystAnswer | Refusal, manifest: Path | None = None
    ) -> tuple[TrialScore, list[EvidenceResult]]:
        """Re-execute the evidence of `output` and score it against the reference."""
        evidence: list[EvidenceResult] = []
        if isinstance(output, AnalystAnswer):
            store, _ = self.store(scenario)
            probes = (  # a prediction's program is checked on permuted labels instead
                self.probes_for(scenario, manifest) if scenario.prediction is None else []
            )
            evidence = reexecute(
                output, scenario, store, self._python(store.mount_path, store.connect), probes
            )
            self.probe_gaps = sorted({gap for probe in probes for gap in probe.gaps(scenario)})
            unguarded = sorted({u for probe in probes if (u := probe.unguarded(scenario))})
            self.probe_unguarded = "; ".join(unguarded) or None
        reference = self.reference(scenario, manifest)
        if scenario.prediction is not None and isinstance(output, AnalystAnswer):
            permuted, perturbed = (
                permutation_run(scenario, output, evidence, self._permuted_python(scenario, c), c)
                for c in CHECKS
            )
            score = score_prediction(scenario, output, evidence, reference, permuted, perturbed)
        else:
            score = score_answer(scenario, output, evidence, reference)
        if isinstance(output, AnalystAnswer) and scenario.scope is not None:  # cited reads
            accesses, _ = observed_reads(
                scenario, AnalystRun(output=output), self.store(scenario)[0]
            )
            reasons = [*score.reasons, *boundary_reasons(scenario, accesses)]
            score = TrialScore.from_reasons(reasons, score.checks) if accesses else score
        return score, evidence

    def close(self) -> None:
        stores, self._stores = self._stores, {}
        for store in stores.values():
            store.teardown()
        self.probes.teardown()
        for folder in self.backends.teardown():
            remove_folder(folder)
        if self._sandboxes is not None:
            self._sandboxes.teardown_session()
            self._sandboxes = None
        remove_folder(self.data_dir / "sandbox" / f"score-{os.getpid()}")


SCORED = {
    "pass",
    "wrong_value",
    "missing_metric",
    "duplicate_metric",
    "unsupported_evidence",
    "false_refusal",
    "invented_value",
    "unhelpful_refusal",
    "followed_injection",
}
"""Outcomes decided by scoring an answer (the others say the answer never came)."""


def rescore_run(
    records: list[dict[str, Any]],
    find: Callable[[dict[str, Any]], tuple[Scenario, Path | None] | None],
    scorer_for: Callable[[str], HandScorer],
) -> tuple[list[str], list[str], list[str]]:
    """Score every recorded answer of a run again; (each answer's new outcome, disagreements,
    cases not found). `find` gives a record's scenario (and manifest), wherever it lives."""
    scored: list[str] = []
    wrong: list[str] = []
    missing: list[str] = []
    for record in records:
        if record.get("outcome") not in SCORED or record.get("answer") is None:
            continue
        found = find(record)
        if found is None:
            where = record.get("scenario_file") or "the current folder or the shipped benchmark"
            missing.append(f"{record['scenario_id']}: no such case in {where}")
            continue
        scenario, manifest = found
        output = parse_answer(record["answer"])
        score, _ = scorer_for(str(record.get("backend") or "sqlite")).score(
            scenario, output, manifest
        )
        scored.append(score.outcome.value)
        if score.outcome.value != record["outcome"]:
            why = "; ".join(r.message for r in score.reasons)[:500]
            wrong.append(
                f"{record['scenario_id']} t{record.get('trial')}: the trial gave "
                f"{record['outcome']}, backintel score gives {score.outcome.value} ({why})"
            )
    return scored, wrong, missing
