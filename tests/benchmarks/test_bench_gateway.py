"""The model gateway's cost per model request: the same requests with the real `openai` client
straight to the scripted model server and through the gateway (whole and streamed), one
client keeping its connection, `BACKINTEL_BENCH_GATEWAY_N` requests each (default 300) after
20 to warm up. Printed: median, 90th percentile and mean milliseconds per request, and the
gateway's added median. Nothing asserted.

    BACKINTEL_BENCHMARKS=1 uv run pytest tests/benchmarks/test_bench_gateway.py -p no:xdist -s
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

import openai
import pytest

from pytest_backintel.analyst_api import AnalystLimits
from pytest_backintel.run.gateway import ModelGateway, Upstream
from pytest_backintel.testing.model_server import ModelServer, Step

pytestmark = pytest.mark.benchmark

N = int(os.environ.get("BACKINTEL_BENCH_GATEWAY_N", "300"))
PROMPT = "How many orders were delivered?"


def _time(call: Callable[[], object]) -> list[float]:
    for _ in range(20):
        call()
    spent = []
    for _ in range(N):
        started = time.perf_counter()
        call()
        spent.append((time.perf_counter() - started) * 1000)
    return spent


def _line(label: str, ms: list[float]) -> str:
    p90 = statistics.quantiles(ms, n=10)[-1]
    median, mean = statistics.median(ms), statistics.fmean(ms)
    return f"{label:<30} median {median:6.2f} ms  p90 {p90:6.2f}  mean {mean:6.2f}"


def test_gateway_overhead_per_request(model_server: ModelServer) -> None:
    model_server.script("orders were delivered", [Step.prose("42", usage=(100, 10))] * 2)
    ask = [{"role": "user", "content": PROMPT}]

    def runner(client: openai.OpenAI, stream: bool) -> Callable[[], object]:
        if stream:
            return lambda: list(
                client.chat.completions.create(model="m", messages=ask, stream=True)  # type: ignore[arg-type]
            )
        return lambda: client.chat.completions.create(model="m", messages=ask)  # type: ignore[arg-type]

    direct = openai.OpenAI(base_url=model_server.url, api_key="x", max_retries=0)
    lines = []
    results: dict[str, list[float]] = {}
    for stream in (False, True):
        results[f"direct {stream}"] = _time(runner(direct, stream))
    with ModelGateway(Upstream.resolve("openai:qwen3", model_server.url)) as gw:
        key = gw.open_trial("bench/t1", AnalystLimits(max_requests=10**9, max_tokens=None))
        through = openai.OpenAI(base_url=gw.openai_base_url, api_key=key.token, max_retries=0)
        for stream in (False, True):
            results[f"gateway {stream}"] = _time(runner(through, stream))
        usage = gw.close_trial(key)
    assert usage.requests == 2 * (N + 20)
    for stream, kind in ((False, "whole"), (True, "streamed")):
        lines.append(_line(f"direct, {kind}", results[f"direct {stream}"]))
        lines.append(_line(f"through the gateway, {kind}", results[f"gateway {stream}"]))
        added = statistics.median(results[f"gateway {stream}"]) - statistics.median(
            results[f"direct {stream}"]
        )
        lines.append(f"{'added by the gateway':<30} median {added:6.2f} ms")
    print("\n" + "\n".join(lines))
