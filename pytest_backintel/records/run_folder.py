"""Checks made before a run writes anything: the run folder, the analyst's model.

`check_run_folder` refuses a `--run-id` whose folder already holds records unless
`--append-run` was given. `preflight` runs the analyst's own `check()` (the model analyst
resolves its model, which needs the provider's package and key, and checks that a base URL
answers) so a bad model configuration is one usage error before the first item.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_backintel import __version__
from pytest_backintel.analyst_api import UNSAFE_AGENT, AnalystLimits
from pytest_backintel.options import (
    CALIBRATION_ANALYSTS,
    BenchOptions,
    analyst_label,
    spec_kind,
)
from pytest_backintel.records.attempts import retried
from pytest_backintel.records.method_hash import analyst_method_hash, model_api_of
from pytest_backintel.records.parts import read_shard, record_resumption
from pytest_backintel.records.writer import (
    git_state,
    no_usage_warning,
    now_iso,
    package_versions,
    probe_warnings,
    read_json,
    read_records,
)

__all__ = [
    "candidate",
    "check_run_folder",
    "final_header",
    "preflight",
    "read_plan",
    "records_in",
    "records_summary",
    "replayed",
    "run_header",
    "write_plan",
]


def records_in(run_dir: Path) -> int:
    """How many trial records the folder holds (merged or still in worker parts)."""
    merged = run_dir / "records.jsonl"
    if merged.is_file():
        return len(read_records(merged))
    return sum(len(read_records(p)) for p in sorted((run_dir / "parts").glob("records-*.jsonl")))


def check_run_folder(run_dir: Path, append: bool) -> dict[str, Any] | None:
    """None for a fresh folder; with `--append-run`, what this run appends to; otherwise a
    folder with records is refused with a usage error."""
    found = records_in(run_dir) if run_dir.is_dir() else 0
    if not found:
        return None
    if not append:
        raise pytest.UsageError(
            f"run folder {run_dir} already holds {found} trial records from an earlier run: "
            "choose another --run-id (or leave it out for a fresh one), or pass --append-run "
            "to add this run's trials to it"
        )
    return {"at": now_iso(), "records_before": found}


def preflight(analyst: object, opts: BenchOptions, sandbox: Callable[[], object]) -> None:
    """Before the first item: the sandbox can run (`sandbox()` raises a usage error naming
    the fix when it cannot), and the analyst's `check()`, if it has one, passes (any failure
    is one usage error)."""
    check = getattr(analyst, "check", None)
    try:
        if callable(check):
            check()
    except Exception as exc:  # a missing key, package or server: the user's to fix
        what = f"--model {opts.model}" if opts.model else f"--analyst {opts.analyst}"
        raise pytest.UsageError(f"backintel: {what} cannot be used: {_in_our_words(exc)}") from exc
    sandbox()


_MISSING_KEY = re.compile(r"Set the `([A-Z][A-Z0-9_]*)` environment variable")


def _in_our_words(exc: Exception) -> str:
    """A provider library's advice for a missing key, as what to do here, in one line."""
    found = _MISSING_KEY.search(str(exc))
    if found is None:
        return str(exc)
    return (
        f"no API key: set {found.group(1)} in the environment (for a server of your own, "
        "--model-base-url, with BACKINTEL_MODEL_API_KEY if it checks keys)"
    )


def records_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The `run.json` fields computed from the run's records (`intervals`: every rate with its
    interval, `records.rates`)."""
    from pytest_backintel.records.rates import run_intervals  # scipy, statsmodels: at the end

    scen = sorted({f"{r['scenario_id']}@{r.get('scenario_sha', '')}" for r in records})
    unmetered = sum(1 for r in records if (r.get("usage") or {}).get("tokens_reported") is False)
    return {
        "scenario_hash": hashlib.sha256("\n".join(scen).encode()).hexdigest(),
        "data_hashes": dict(
            sorted({(r["world"], r["data_hash"]) for r in records if r.get("data_hash")})
        ),
        "data_hash_methods": dict(
            sorted({(r["world"], m) for r in records if (m := r.get("data_hash_method"))})
        ),
        "stores_used": sorted({str(r["backend"]) for r in records if r.get("backend")}),
        "outcomes": dict(sorted(Counter(r["outcome"] for r in records).items())),
        "trials_recorded": len(records),
        "usage_unreported_trials": unmetered,
        "warnings": ([UNSAFE_AGENT] if any(r.get("unsafe") for r in records) else [])
        + ([w] if (w := no_usage_warning(unmetered)) else [])
        + probe_warnings(records),
        "probe_gaps": sorted({g for r in records for g in r.get("probe_gaps") or []}),
        "unguarded_trials": sum(1 for r in records if r.get("probe_unguarded")),
        "intervals": run_intervals(records),
    }


def replayed(opts: BenchOptions) -> BenchOptions:
    """For `--analyst replay:DIR`: the recorded run's model id and per-trial limits, so the
    replay is measured under the limits the recording was (a run folder or its cassettes)."""
    if not opts.analyst.startswith("replay:"):
        return opts
    folder = Path(opts.analyst.removeprefix("replay:"))
    recorded = read_json(folder / "run.json") or read_json(folder.parent / "run.json")
    if not recorded:
        return opts
    limits = recorded.get("limits")
    known = set(AnalystLimits.__dataclass_fields__)
    if isinstance(limits, dict) and set(limits) <= known:
        opts = replace(opts, limits=AnalystLimits(**limits))
    return replace(opts, model=recorded.get("model") or opts.model)


def run_header(
    opts: BenchOptions, root: Path, run_id: str, sandbox: dict[str, Any], args: list[str]
) -> dict[str, Any]:
    """`run.json` as a run starts: who and what is measured, with which limits and code."""
    return {
        "run_id": run_id,
        "started_at": now_iso(),
        "harness_version": __version__,
        "analyst": {
            "spec": opts.analyst,
            "calibration": opts.analyst in CALIBRATION_ANALYSTS,
            "kind": spec_kind(opts.analyst),
            "label": UNSAFE_AGENT
            if opts.analyst_unsandboxed
            else analyst_label(opts.analyst) or "model under test",
            **({"unsafe": UNSAFE_AGENT} if opts.analyst_unsandboxed else {}),
            **({"suite_file": f"{f[0]}:{f[1]}"} if (f := opts.analyst_from) else {}),
        },
        "model": opts.model,
        "model_base_url": opts.model_base_url,
        "model_api": model_api_of(opts),
        "store_backend": opts.store,
        "sandbox": sandbox,
        "trials": opts.trials,
        "concurrency": opts.concurrency,
        "max_connections": opts.max_connections,
        "limits": vars(opts.limits) | {},
        "run_limits": vars(opts.run_limits) | {},
        "record": opts.record,
        "freeze": None,
        "git": git_state(root),
        "method_hash": analyst_method_hash(opts),
        "packages": package_versions(),
        "args": args,
    }


def candidate(opts: BenchOptions, root: Path) -> dict[str, Any]:
    """What a frozen run measures: the commit, the method, the analyst and its settings."""
    return {
        "git_sha": git_state(root)["sha"],
        "method_hash": analyst_method_hash(opts),
        "analyst": opts.analyst,
        "model": opts.model,
        "model_base_url": opts.model_base_url,
        "limits": vars(opts.limits),
        "harness_version": __version__,
        "store_backend": opts.store,
    }


def write_plan(run_dir: Path, worker: str, items: list[Any], collect_only: bool) -> None:
    """Every trial this process will run, by node id, before any runs (`compare` names a
    planned trial that left no record). Nothing is written by `--collect-only`."""
    nodeids = sorted(i.nodeid for i in items if hasattr(i, "scenario"))
    if collect_only or not nodeids:  # nothing will run: no run folder either
        return
    path = run_dir / "parts" / f"plan-{worker}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nodeids))


def read_plan(run_dir: Path) -> list[str] | None:
    """The union of the processes' plans (xdist workers plan the same items), or None."""
    parts = sorted((run_dir / "parts").glob("plan-*.json"))
    if not parts:
        return None
    return sorted({n for part in parts for n in json.loads(part.read_text())})


def final_header(
    run_dir: Path,
    started: dict[str, Any],
    records: list[dict[str, Any]],
    *,
    exit_status: int,
    append_run: bool,
    budget_spent: dict[str, Any] | None,
    freeze_check: dict[str, Any] | None,
) -> dict[str, Any]:
    """run.json at the end of a session: the header this session `started` with, under what
    an earlier session of an appended folder wrote, the records' summary and how it ended."""
    from pytest_backintel.records.tracing import merge_traces

    earlier = read_json(run_dir / "run.json")
    header = started | earlier | records_summary(records)
    if append_run and earlier.get("started_at") != started["started_at"]:
        header["appended"] = [*earlier.get("appended", []), started["appended_to"]]
    header.update(
        {
            "finished_at": now_iso(),
            "exit_status": exit_status,
            "freeze_check": freeze_check,
            "planned_items": read_plan(run_dir),
            "spans": merge_traces(run_dir),
            "budget_spent": budget_spent,
            "shard": read_shard(run_dir),
            "retried": retried(records),
        }
    )
    record_resumption(header, started, records)
    return header
