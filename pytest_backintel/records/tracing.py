"""Traces of every trial, written offline to `results/<run-id>/traces.jsonl`.

Pydantic AI's own OpenTelemetry instrumentation (`Agent.instrument_all`) records each agent
run, model request and tool call; the harness wraps each trial in a `backintel trial` span so
that every span of the trial shares its trace id, which the trial's record carries as
`trace_id`. Spans go to `JsonlSpanExporter`, one JSON line each, into this process's
`parts/traces-<worker>.jsonl`; the controller merges the parts into `traces.jsonl`.

Nothing is sent anywhere: the tracer provider is private to the harness, unless the user has
installed an OpenTelemetry SDK provider globally themselves (for example with
`logfire.configure()`), in which case the harness adds its file exporter to that provider
and the user's own exporters see the same spans.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Span, Status, StatusCode

from pytest_backintel.records.live import LIVE
from pytest_backintel.records.writer import open_append, read_json_lines, write_json_lines

if TYPE_CHECKING:
    from pydantic_ai.models.instrumented import InstrumentationSettings

__all__ = [
    "TRACES_FILE",
    "JsonlSpanExporter",
    "Tracing",
    "TrialSpan",
    "merge_traces",
    "span_to_json",
]

TRACES_FILE = "traces.jsonl"
TRACER_NAME = "backintel"


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def _iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    stamp = datetime.fromtimestamp(ns // 1_000_000_000, UTC).replace(
        microsecond=(ns % 1_000_000_000) // 1000
    )
    return stamp.isoformat(timespec="microseconds")


def _value(value: Any) -> Any:
    """An attribute value as JSON: sequences become lists, anything else stays a scalar."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, Sequence):
        return [_value(v) for v in value]
    return str(value)


def _attributes(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    return {str(k): _value(v) for k, v in (attrs or {}).items()}


def span_to_json(span: ReadableSpan, worker: str) -> dict[str, Any]:
    """One finished span as a JSON object: ids in hex, times in ISO 8601 UTC."""
    ctx = span.get_span_context()
    assert ctx is not None, "a finished SDK span always has a context"
    start, end = span.start_time, span.end_time
    return {
        "trace_id": _hex(ctx.trace_id, 32),
        "span_id": _hex(ctx.span_id, 16),
        "parent": _hex(span.parent.span_id, 16) if span.parent else None,
        "name": span.name,
        "kind": span.kind.name,
        "start": _iso(start),
        "end": _iso(end),
        "start_ns": start,
        "duration_s": (end - start) / 1e9 if start is not None and end is not None else None,
        "status": span.status.status_code.name,
        "status_description": span.status.description,
        "attributes": _attributes(span.attributes),
        "events": [
            {"name": e.name, "time": _iso(e.timestamp), "attributes": _attributes(e.attributes)}
            for e in span.events
        ],
        "worker": worker,
    }


class JsonlSpanExporter(SpanExporter):
    """Appends each finished span as one JSON line to `path` (flushed per batch)."""

    def __init__(self, path: Path, worker: str) -> None:
        self.path = path
        self.worker = worker
        self._file: TextIO | None = None
        self._lock = threading.Lock()
        self._closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(
            json.dumps(span_to_json(s, self.worker), sort_keys=True, default=str) + "\n"
            for s in spans
        )
        with self._lock:
            if self._closed:
                return SpanExportResult.FAILURE
            if self._file is None:
                self._file = open_append(self.path)
            self._file.write(lines)
            self._file.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            if self._file is not None:
                self._file.close()
                self._file = None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        with self._lock:
            if self._file is not None:
                self._file.flush()
        return True


class TrialSpan:
    """The span around one trial: its trace id links the trial's record to its spans."""

    def __init__(self, span: Span) -> None:
        self.span = span

    @property
    def trace_id(self) -> str | None:
        ctx = self.span.get_span_context()
        return _hex(ctx.trace_id, 32) if ctx.is_valid else None

    def finish(self, outcome: str) -> None:
        """Set the trial's outcome on the span (an error status unless it passed)."""
        self.span.set_attribute("backintel.outcome", outcome)
        if outcome != "pass":
            self.span.set_status(Status(StatusCode.ERROR, outcome))


class Tracing:
    """Offline tracing for one pytest process; `start` instruments every Pydantic AI agent."""

    def __init__(self, run_dir: Path, worker: str) -> None:
        self.exporter = JsonlSpanExporter(run_dir / "parts" / f"traces-{worker}.jsonl", worker)
        # Exported off the trial's thread, in batches; everything is flushed at close.
        self._processor: SpanProcessor = BatchSpanProcessor(
            self.exporter, schedule_delay_millis=500
        )
        self._provider: TracerProvider | None = None
        self._own_provider = False
        self._previous: InstrumentationSettings | bool = False

    @property
    def started(self) -> bool:
        return self._provider is not None

    def start(self) -> None:
        """Route spans to the file and instrument all agents (idempotent)."""
        if self._provider is not None:
            return
        from pydantic_ai import Agent
        from pydantic_ai.models.instrumented import InstrumentationSettings

        current = trace.get_tracer_provider()
        if isinstance(current, TracerProvider):  # the user configured OpenTelemetry/Logfire
            self._provider = current
        else:
            self._provider = TracerProvider()
            self._own_provider = True
        self._provider.add_span_processor(self._processor)
        LIVE.attach(self._provider)  # the progress line sees each trial's requests as they end
        self._previous = Agent._instrument_default
        Agent.instrument_all(
            InstrumentationSettings(
                tracer_provider=self._provider, include_model_request_parameters=False
            )
        )

    @contextmanager
    def trial(self, nodeid: str, case_key: str) -> Iterator[TrialSpan]:
        """A `backintel trial` span, current while the trial runs (started on first use)."""
        self.start()
        assert self._provider is not None
        tracer = self._provider.get_tracer(TRACER_NAME)
        attributes = {"backintel.nodeid": nodeid, "backintel.case_key": case_key}
        with tracer.start_as_current_span(
            f"backintel trial {case_key}", attributes=attributes
        ) as span:
            yield TrialSpan(span)

    def close(self) -> None:
        """Flush and close the file; restore the agents' previous instrumentation."""
        if self._provider is None:
            return
        from pydantic_ai import Agent

        Agent.instrument_all(self._previous)
        if self._own_provider:
            self._provider.shutdown()
        else:
            self._processor.shutdown()
        self._provider = None


def merge_traces(run_dir: Path) -> int | None:
    """Merge every `parts/traces-*.jsonl` into `traces.jsonl`, ordered by trace and start
    time; return the number of spans (None when no trial was traced). A torn last line (a
    killed worker) is skipped."""
    parts = sorted((run_dir / "parts").glob("traces-*.jsonl"))
    if not parts:
        return None
    spans = [
        (str(s.get("trace_id", "")), s.get("start_ns") or 0, line)
        for part in parts
        for s, line in read_json_lines(part)
    ]
    first: dict[str, int] = {}
    for tid, start, _ in spans:
        first[tid] = min(first.get(tid, start), start)
    spans.sort(key=lambda s: (first[s[0]], s[0], s[1]))
    write_json_lines(run_dir / TRACES_FILE, (line for _, _, line in spans))
    return len(spans)
