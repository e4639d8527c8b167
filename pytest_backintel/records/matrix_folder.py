"""The folders of a model matrix: `results/<matrix-id>/<model-slug>/` per model and
`results/<matrix-id>/matrix.json`.

The matrix folder is itself the run of every model's trials (its `run.json` has `matrix`, its
records their `model`). `write_matrix` derives from it, after every session and every merge, a
normal run folder per model (`run.json` with that model's settings, planned items and summary;
`records.jsonl`; `traces.jsonl`; the cassettes a `--record` run wrote there), which
`backintel report`, `view` and `compare` read like any run, and `matrix.json`: the models, their
folders, what each planned and recorded, and the leaderboard (`records.leaderboard`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pytest_backintel.records.writer import (
    now_iso,
    read_json,
    read_json_lines,
    write_json,
    write_json_lines,
)

__all__ = ["MATRIX_FILE", "is_matrix", "model_of_nodeid", "write_matrix"]

MATRIX_FILE = "matrix.json"
_MATRIX_PART = re.compile(r"\[t\d+-(?P<slug>[^\]]+)\]$")


def is_matrix(header: dict[str, Any]) -> bool:
    return isinstance(header.get("matrix"), dict) and bool(header["matrix"].get("models"))


def model_of_nodeid(nodeid: str, folders: dict[str, str]) -> str | None:
    """The model a matrix item id names (`...[t1-<slug>]`), None if none of `folders`'."""
    found = _MATRIX_PART.search(nodeid)
    by_slug = {slug: model for model, slug in folders.items()}
    return by_slug.get(found.group("slug")) if found else None


def _summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    from pytest_backintel.records.run_folder import records_summary

    return records_summary(records)


def write_matrix(run_dir: Path, header: dict[str, Any], records: list[dict[str, Any]]) -> Path:
    """Write each model's run folder and `matrix.json` from the matrix run's final `header`
    and `records`; returns the path of `matrix.json`."""
    matrix = header["matrix"]
    folders: dict[str, str] = matrix["folders"]
    planned = header.get("planned_items") or []
    traces = (
        read_json_lines(run_dir / "traces.jsonl") if (run_dir / "traces.jsonl").is_file() else []
    )
    by_model: dict[str, list[dict[str, Any]]] = {m: [] for m in matrix["models"]}
    for record in records:
        by_model.setdefault(str(record.get("model")), []).append(record)
    entries = []
    for model in matrix["models"]:
        folder, mine = run_dir / folders[model], by_model[model]
        own_plan = sorted(n for n in planned if model_of_nodeid(n, folders) == model)
        model_header = (
            {k: v for k, v in header.items() if k not in ("matrix", "resumption")}
            | matrix["per_model"][model]
            | _summary(mine)
            | {
                "run_id": f"{header.get('run_id')}.{folders[model]}",
                "planned_items": own_plan,
                "matrix_of": {"matrix_id": header.get("run_id"), "model": model},
            }
        )
        write_json(folder / "run.json", model_header)
        lines = [json.dumps(r, sort_keys=True, default=str) for r in mine]
        write_json_lines(folder / "records.jsonl", lines)
        trace_ids = {r.get("trace_id") for r in mine if r.get("trace_id")}
        own_traces = [line for t, line in traces if t.get("trace_id") in trace_ids]
        if own_traces:
            write_json_lines(folder / "traces.jsonl", own_traces)
        entries.append(
            {
                "model": model,
                "folder": folders[model],
                "planned": len(own_plan),
                "recorded": len(mine),
                "method_hash": matrix["per_model"][model].get("method_hash"),
            }
        )
    from pytest_backintel.records.leaderboard import leaderboard  # numpy: on use

    rows = leaderboard(by_model, folders)
    out = run_dir / MATRIX_FILE
    earlier = read_json(out)
    write_json(
        out,
        {
            "matrix_id": header.get("run_id"),
            "created_at": earlier.get("created_at") or header.get("started_at") or now_iso(),
            "updated_at": now_iso(),
            "trials_per_case": header.get("trials"),
            "models": entries,
            "leaderboard": [row.to_json() for row in rows],
        },
    )
    return out
