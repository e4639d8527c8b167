"""`backintel serve-tools SCENARIO_ID`: one development scenario's tools for a person.

Serves the scenario's store through the same MCP tools an external agent gets (list_tables,
describe_table, run_sql, submit_answer, refuse) on loopback Streamable HTTP, or over stdio
for a client that spawns it, until interrupted; prints the URL and token. An answer submitted
is scored as a trial would score it, and the outcome printed. Reserved scenarios are refused:
trying their questions by hand would spend them.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import signal
import sys
import threading
from pathlib import Path
from typing import Any

__all__ = ["register", "serve_tools"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "serve-tools",
        help="serve one development scenario's tools over MCP for a person to try by hand",
    )
    p.add_argument("scenario", help="a development scenario's id")
    p.add_argument(
        "--scenarios",
        type=Path,
        default=None,
        help="a folder of scenario files (default: the shipped benchmark's)",
    )
    p.add_argument("--port", type=int, default=0, help="loopback port (default: any free one)")
    p.add_argument("--store", default="sqlite", help="store backend (default: sqlite)")
    p.add_argument("--stdio", action="store_true", help="speak MCP on stdin/stdout instead of HTTP")
    p.add_argument("--max-tool-calls", type=int, default=1000, help="tool calls allowed")
    p.set_defaults(func=serve_tools)


def serve_tools(args: argparse.Namespace) -> int:
    from analyst.mcp_tools import TrialTools
    from pytest_backintel.collect.loading import (
        DEFINITIONS_DIR,
        ScenarioFileError,
        find_scenarios,
    )
    from pytest_backintel.collect.worlds import data_dir
    from pytest_backintel.run.external.server import TrialServer
    from pytest_backintel.run.hand_score import HandScorer
    from pytest_backintel.scoring.rules import answer_rules

    try:
        scenarios = find_scenarios(args.scenarios or DEFINITIONS_DIR)
    except ScenarioFileError as exc:
        print(f"backintel serve-tools: {exc}", file=sys.stderr)
        return 2
    if args.scenario not in scenarios:
        print(
            f"backintel serve-tools: no scenario {args.scenario!r} here; "
            "`backintel validate` lists the scenario files",
            file=sys.stderr,
        )
        return 2
    scenario = scenarios[args.scenario][1]
    if scenario.split.value != "development":
        print(
            f"backintel serve-tools: {scenario.id} is a {scenario.split.value} scenario; only "
            "development scenarios are served (trying a reserved question by hand spends it)",
            file=sys.stderr,
        )
        return 2
    scorer = HandScorer(data_dir(Path.cwd()), store=args.store)
    store, _ = scorer.store(scenario)
    tools = TrialTools(
        store.connect,
        None,
        max_tool_calls=args.max_tool_calls,
        question=scenario.question,
        rules=answer_rules(scenario),
        name=f"backintel-{scenario.id}",
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        if args.stdio:
            print(f"backintel serve-tools: {scenario.id} over stdio", file=sys.stderr)
            asyncio.run(tools.server.run_stdio_async())
        else:
            server = TrialServer(tools, secrets.token_hex(8), None, port=args.port).start()
            print(f"scenario: {scenario.id}\nquestion: {scenario.question}")
            print(f"url: {server.url}\ntoken: {server.token}", flush=True)
            scored = 0
            while not stop.wait(0.2):
                if len(tools.answers) > scored:
                    score, _ = scorer.score(scenario, tools.answers[scored])
                    scored += 1
                    print(f"answer scored: {score.outcome.value}", flush=True)
            server.close()
    finally:
        tools.close()
        scorer.close()
    print(f"{len(tools.calls)} tool call(s) served", file=sys.stderr)
    return 0
