"""`python -m pytest_backintel.testing.model_server`: the scripted server from the command line.

    python -m pytest_backintel.testing.model_server --scripts scripts.json [--port 8765]

prints its base URL (`http://127.0.0.1:<port>/v1`, for `--model-base-url`) on the first line
and serves until interrupted. `scripts.json` maps a substring of a question (the user prompt,
case-insensitive) to the assistant turns that answer it, one per request:

    {"delivered": [
        {"call": "run_sql", "args": {"sql": "SELECT COUNT(*) AS n FROM orders"}},
        {"answer": {"metrics": [...], "evidence": [...], "method": "..."}}],
     "margin": [{"refusal": {"missing": ["cost"], "explanation": "..."}}]}

A turn is one of `call` (a tool and its `args`), `answer` (a contract answer), `refusal` or
`prose` (text instead of a tool call), with optional `usage` (`[prompt, completion]` tokens,
or null for none) and `delay_s`.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_backintel.testing.model_server import ModelServer, Step

__all__ = ["main", "parse_steps"]

_KINDS = ("call", "answer", "refusal", "prose")


def _step(turn: Any, where: str) -> Step:
    if not isinstance(turn, dict) or sum(k in turn for k in _KINDS) != 1:
        raise ValueError(f"{where}: a turn gives exactly one of {', '.join(_KINDS)}")
    extra: dict[str, Any] = {}
    if "usage" in turn:
        extra["usage"] = None if turn["usage"] is None else tuple(turn["usage"])
    if "delay_s" in turn:
        extra["delay_s"] = float(turn["delay_s"])
    if "call" in turn:
        return Step.call(str(turn["call"]), turn.get("args"), **extra)
    if "answer" in turn:
        body = turn["answer"]
        return Step.answer(
            body["metrics"], body["evidence"], body.get("method", "scripted"), **extra
        )
    if "refusal" in turn:
        return Step.refusal(turn["refusal"]["missing"], turn["refusal"]["explanation"], **extra)
    return Step.prose(str(turn["prose"]), **extra)


def parse_steps(doc: Any) -> dict[str, list[Step]]:
    """Scripts from their JSON form; `ValueError` naming the script and turn that is wrong."""
    if not isinstance(doc, dict):
        raise ValueError("a scripts file maps a question substring to a list of turns")
    out: dict[str, list[Step]] = {}
    for match, turns in doc.items():
        if not isinstance(turns, list):
            raise ValueError(f"{match!r}: a list of turns, got {turns!r:.60}")
        try:
            out[match] = [_step(t, f"{match!r} turn {i}") for i, t in enumerate(turns, 1)]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{match!r}: a turn lacks or mistypes {exc}") from exc
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_backintel.testing.model_server", description=__doc__
    )
    parser.add_argument("--scripts", required=True, help="the scripts JSON file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="default: a free port")
    args = parser.parse_args(argv)
    try:
        scripts = parse_steps(json.loads(Path(args.scripts).read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        print(f"model_server: {args.scripts}: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with ModelServer(args.host, args.port) as server:
        for match, steps in scripts.items():
            server.script(match, steps)
        print(server.url, flush=True)
        stop.wait()
        print(f"served {len(server.requests)} request(s)", flush=True)
    return 0
