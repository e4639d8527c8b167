"""Cassettes: each trial's full Pydantic AI message history, for offline replay; for an
external agent, the exchanges the model gateway recorded (`t<trial>.exchanges.json`: each
request and the response it got, which a replaying gateway serves back).

`--record` writes `results/<run-id>/cassettes/<scenario-id>/t<trial>.json`, the history in
the JSON form of `ModelMessagesTypeAdapter`. `--analyst replay:DIR` (see `analyst.replay`)
reads them back by the trial's case key, `<scenario-id>/t<trial>`.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from pytest_backintel.analyst_api import AnalystRun

__all__ = [
    "CASSETTES_DIR",
    "CassetteError",
    "case_key",
    "cassette_path",
    "find_cassette_dir",
    "read_cassette",
    "read_exchanges",
    "write_cassette",
    "write_exchanges",
]

CASSETTES_DIR = "cassettes"
EXCHANGES_SUFFIX = ".exchanges.json"
_KEY = re.compile(r"^(?P<scenario>[A-Za-z0-9][A-Za-z0-9._-]*)/t(?P<trial>[1-9][0-9]*)$")


class CassetteError(Exception):
    """A cassette folder or file is missing or unreadable; the message says which and why."""


def case_key(scenario_id: str, trial: int) -> str:
    """The key naming one trial's cassette: `<scenario-id>/t<trial>`."""
    key = f"{scenario_id}/t{trial}"
    if not _KEY.match(key):
        raise CassetteError(
            f"case key {key!r}: a scenario id is letters, digits, '.', '_' or '-' and the "
            "trial a whole number from 1"
        )
    return key


def cassette_path(cassettes: Path, key: str) -> Path:
    """Where the cassette for `key` lives under a cassettes folder."""
    match = _KEY.match(key)
    if match is None:
        raise CassetteError(f"case key {key!r} is not of the form '<scenario-id>/t<trial>'")
    return cassettes / match["scenario"] / f"t{match['trial']}.json"


def write_cassette(run_dir: Path, key: str, run: AnalystRun | None) -> Path | None:
    """Write one trial's message history atomically; None when the analyst left no run."""
    if run is None:
        return None
    path = cassette_path(run_dir / CASSETTES_DIR, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(run.messages, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def find_cassette_dir(folder: Path) -> Path:
    """The cassettes folder of a run folder, or `folder` itself when it is one."""
    if not folder.is_dir():
        raise CassetteError(
            f"replay folder {str(folder)!r} does not exist: give a run folder recorded with "
            "--record (results/<run-id>) or its cassettes folder"
        )
    inner = folder / CASSETTES_DIR
    if inner.is_dir():
        return inner
    if any(folder.glob("*/t*.json")):
        return folder
    raise CassetteError(
        f"replay folder {str(folder)!r} holds no cassettes: expected "
        f"{CASSETTES_DIR}/<scenario-id>/t<trial>.json (record a run with --record)"
    )


def _read_list(path: Path, what: str, missing: str) -> list[Any]:
    """The JSON list in `path` (the `what` of one trial); `missing` says why it may be absent."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CassetteError(missing) from None
    except (OSError, ValueError) as exc:
        raise CassetteError(f"{what} {path} is not readable JSON: {exc}") from exc
    if not isinstance(data, list):
        raise CassetteError(f"{what} {path}: expected a list, got {type(data).__name__}")
    return data


def read_cassette(cassettes: Path, key: str) -> list[dict[str, Any]]:
    """The recorded message history (JSON form) of the trial `key`."""
    path = cassette_path(cassettes, key)
    return _read_list(
        path,
        "cassette",
        f"no cassette for trial {key!r} at {path}: that trial was not recorded "
        "(record it with --record and the same scenario and --trials)",
    )


def _exchanges_path(cassettes: Path, key: str) -> Path:
    path = cassette_path(cassettes, key)
    return path.with_name(path.stem + EXCHANGES_SUFFIX)


def write_exchanges(run_dir: Path, key: str, exchanges: list[dict[str, Any]]) -> Path:
    """Write the model gateway's exchanges of one trial atomically."""
    path = _exchanges_path(run_dir / CASSETTES_DIR, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(exchanges, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def read_exchanges(cassettes: Path, key: str) -> list[dict[str, Any]]:
    """The model gateway's recorded exchanges of the trial `key`, for a replaying gateway."""
    path = _exchanges_path(cassettes, key)
    data = _read_list(
        path,
        "gateway recording",
        f"no gateway recording for trial {key!r} at {path}: that trial was not recorded "
        "through the model gateway (record it with --record)",
    )
    if not all(isinstance(e, dict) for e in data):
        raise CassetteError(f"gateway recording {path}: expected a list of exchanges")
    return data
