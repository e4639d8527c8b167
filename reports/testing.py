"""Write run folders by hand, in the harness's format: for tests, docs and demos.

`record(...)` builds one `records.jsonl` line with every field the harness writes;
`synthetic_records(n)` makes n varied ones (for the viewer's tests and benchmarks);
`write_run(folder, header, records)` writes `run.json` and `records.jsonl`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from pytest_backintel.records.writer import NO_USAGE_TRIAL

__all__ = ["DATA_HASH", "header", "record", "synthetic_records", "write_run"]

DATA_HASH = "d" * 64


def header(
    run_id: str,
    *,
    calibration: bool = True,
    model: str | None = None,
    spec: str | None = None,
    trials: int = 1,
) -> dict[str, Any]:
    """A `run.json` as `BenchSession.run_header` + `finish` write it."""
    label = "calibration analyst: measures the harness, not a model"
    return {
        "run_id": run_id,
        "started_at": "2026-11-30T10:00:00+00:00",
        "finished_at": "2026-11-30T10:05:00+00:00",
        "harness_version": "0.1.0",
        "analyst": {
            "spec": spec or ("reference" if calibration else "model"),
            "calibration": calibration,
            "label": label if calibration else "model under test",
        },
        "model": model,
        "store_backend": "sqlite",
        "trials": trials,
        "freeze": False,
        "git": {"sha": "0123456789abcdef0123456789abcdef01234567", "dirty": False},
        "method_hash": "a" * 64,
    }


def record(
    case: str,
    outcome: str = "pass",
    *,
    trial: int = 0,
    split: str = "development",
    level: int = 1,
    family: str = "orders",
    answerable: bool = True,
    run_id: str = "run",
    kind: str = "calibration",
    name: str = "reference",
    model: str | None = None,
    latency_s: float = 1.0,
    tokens: tuple[int, int] | None = (0, 0),
    data_hash: str = DATA_HASH,
    sha: str | None = None,
    question: str | None = None,
    cost_usd: float | None = None,
) -> dict[str, Any]:
    """One trial record with the fields `write_record` and `TrialResult.to_record` write
    (`tokens=None`: the provider reported no usage)."""
    reasons = (
        []
        if outcome == "pass"
        else [{"outcome": outcome, "message": f"{case}: {outcome} found", "metric": "m"}]
    )
    blocked = outcome in ("infra_error", "not_run")
    return {
        "run_id": run_id,
        "nodeid": f"scenarios/definitions/{case}.scenario.yaml::{case}[{trial}]",
        "worker": "main",
        "recorded_at": "2026-11-30T10:01:00+00:00",
        "scenario_id": case,
        "scenario_version": 1,
        "scenario_sha": sha or f"sha-{case}",
        "trial": trial,
        "split": split,
        "level": level,
        "family": family,
        "answerable": answerable,
        "question": question or f"How many {case.replace('_', ' ')}?",
        "world": "olist",
        "snapshot": "base",
        "data_hash": data_hash,
        "backend": "sqlite",
        "store": f"sqlite:bi_{case[:6]}",
        "analyst": {"name": name, "kind": kind},
        "model": model,
        "outcome": outcome,
        "reasons": reasons,
        "checks": [],
        "answer": None if blocked else {"status": "answered", "metrics": [], "evidence": []},
        "evidence": []
        if blocked
        else [
            {
                "id": "e1",
                "kind": "sql",
                "code": f"SELECT count(*) AS m FROM {case}",
                "cited": ["m"],
                "ran": True,
                "error": None,
                "values": {"m": 1},
                "reproduced": {"m": outcome != "unsupported_evidence"},
                "details": {},
            }
        ],
        "usage": None
        if blocked
        else {
            "requests": 2 if tokens != (0, 0) else 0,
            "input_tokens": tokens[0] if tokens else None,
            "output_tokens": tokens[1] if tokens else None,
            "tool_calls": 3,
            "tokens_reported": tokens is not None,
        },
        "warnings": [] if blocked or tokens is not None else [NO_USAGE_TRIAL],
        "tool_calls": [],
        "messages": [],
        "analyst_error": None,
        "latency_s": None if blocked else latency_s,
        "cost_usd": None if blocked else cost_usd,
    }


SYNTHETIC_OUTCOMES = (
    *["pass"] * 6,
    "wrong_value",
    "wrong_value",
    "missing_metric",
    "unsupported_evidence",
    "false_refusal",
    "timeout",
    "infra_error",
)
SYNTHETIC_FAMILIES = ("orders", "revenue", "repeat", "delivery", "reviews", "freight", "sellers")


def synthetic_records(count: int, run_id: str = "run", seed: int = 0) -> list[dict[str, Any]]:
    """`count` one-trial cases of varied outcome, split, level, family, latency, tokens and
    cost; the same for the same seed."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        family, level = rng.choice(SYNTHETIC_FAMILIES), rng.randint(1, 6)
        out.append(
            record(
                f"synthetic-{i:05d}",
                rng.choice(SYNTHETIC_OUTCOMES),
                trial=1,
                split=rng.choice(("development", "development", "regression")),
                level=level,
                family=family,
                run_id=run_id,
                latency_s=round(rng.uniform(0.2, 40.0), 3),
                tokens=(rng.randint(500, 60_000), rng.randint(50, 6_000)),
                question=f"Synthetic case {i}: what is the {family} total at level {level}?",
                cost_usd=round(rng.uniform(0.001, 0.5), 5),
            )
        )
    return out


def write_run(
    folder: Path, run_header: dict[str, Any] | None, records: list[dict[str, Any]] | None
) -> Path:
    """Write `run.json` (unless None) and `records.jsonl` (unless None) into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    if run_header is not None:
        (folder / "run.json").write_text(json.dumps(run_header, indent=2, sort_keys=True) + "\n")
    if records is not None:
        (folder / "records.jsonl").write_text(
            "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
        )
    return folder
