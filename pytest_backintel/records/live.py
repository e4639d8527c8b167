"""Trials in flight and one status line about them, redrawn in place on a terminal.

`LiveTrials` is an OpenTelemetry span processor on the harness's tracer: a `backintel trial`
span starting or ending adds or removes a trial, and every model request span (`gen_ai.
operation.name == "chat"`) that ends inside a trial adds one request and its tokens. So the
figures come from the agent's own instrumentation, for serial and concurrent trials alike.

A model request span starting calls `on_request`, and one ending, answered or failed, calls
`on_answer` (the session lets work that can wait, such as building the evidence probes, start
once the first request has left the process and come back).

`LiveLine` draws `status_line(...)` on a terminal of its own (a duplicate of the TTY's file
descriptor, which pytest's output capture does not redirect) after the cursor, saving and
restoring the cursor around it, so `hide()` leaves pytest's own line exactly as it was.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.trace import StatusCode

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import Span

__all__ = ["LIVE", "LiveLine", "LiveTrials", "Running", "status_line"]

TRIAL_SPAN = "backintel trial "
ERROR = StatusCode.ERROR
_SAVE, _RESTORE, _CLEAR = "\x1b7", "\x1b8", "\x1b[K"


@dataclass
class Running:
    """One trial in flight: its case, when it started, what it has spent so far."""

    case: str
    started: float
    requests: int = 0
    tokens: int = 0
    unmetered: bool = False
    """A request came back without token counts: the tokens shown are a lower bound."""
    counted: bool = True
    """False for an item another process runs (an xdist worker): only its elapsed time."""


def _short(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


def status_line(running: list[Running], now: float, width: int) -> str:
    """`backintel: 3 running: l1-x/t1 12s 2 req 1.3k tok | ...`, cut to `width` columns
    (`+?` after tokens a provider did not report)."""
    if not running:
        return ""
    parts = []
    for r in running:
        part = f"{r.case} {now - r.started:.0f}s"
        if r.counted:
            part += f" {r.requests} req {_short(r.tokens)}{'+?' if r.unmetered else ''} tok"
        parts.append(part)
    line = f"backintel: {len(running)} running: " + " | ".join(parts)
    return line if len(line) <= width else line[: max(width - 1, 0)] + "…"


class LiveTrials(SpanProcessor):
    """The trials of this process in flight (by trace id), fed by their spans."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._trials: dict[int, Running] = {}
        self.on_change: Callable[[], None] | None = None
        """Called after every change (the status line redraws)."""
        self.on_request: Callable[[], None] | None = None
        """Called when a model request span starts, before the request is sent."""
        self.on_answer: Callable[[], None] | None = None
        """Called when a model request span ends, answered or failed (the request has left)."""
        self._providers: weakref.WeakSet[TracerProvider] = weakref.WeakSet()
        self.side_work: Callable[[], list[tuple[str, float]]] = list
        """(label, seconds so far) of work under way beside the trials (worlds being built)."""

    def attach(self, provider: TracerProvider) -> None:
        """See the spans of `provider` (once, however often tracing starts on it)."""
        with self._lock:
            if provider in self._providers:
                return
            self._providers.add(provider)
        provider.add_span_processor(self)

    def begin(self, trace_id: int, case: str) -> None:
        with self._lock:
            self._trials[trace_id] = Running(case, self._clock())
        self._changed()

    def end(self, trace_id: int) -> None:
        with self._lock:
            self._trials.pop(trace_id, None)
        self._changed()

    def running(self) -> list[Running]:
        """A copy of the trials in flight, oldest first."""
        with self._lock:
            return sorted((Running(**vars(r)) for r in self._trials.values()), key=_started)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    # -- SpanProcessor ---------------------------------------------------------------------
    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        attrs = span.attributes or {}
        if span.name.startswith(TRIAL_SPAN):
            case = attrs.get("backintel.case_key") or span.name
            self.begin(span.context.trace_id, str(case))
        elif attrs.get("gen_ai.operation.name") == "chat" and self.on_request is not None:
            self.on_request()

    def on_end(self, span: ReadableSpan) -> None:
        ctx = span.context
        if ctx is None:
            return
        if span.name.startswith(TRIAL_SPAN):
            self.end(ctx.trace_id)
            return
        attrs = span.attributes or {}
        if attrs.get("gen_ai.operation.name") == "chat" and self.on_answer is not None:
            self.on_answer()
        if attrs.get("gen_ai.operation.name") != "chat" or span.status.status_code is ERROR:
            return  # not a model request, or one that failed (the record counts neither)
        counts = [attrs.get(f"gen_ai.usage.{k}_tokens") for k in ("input", "output")]
        with self._lock:
            trial = self._trials.get(ctx.trace_id)
            if trial is None:
                return
            trial.requests += 1
            trial.tokens += sum(int(c) for c in counts if isinstance(c, int))
            trial.unmetered |= all(c is None for c in counts)
        self._changed()

    def shutdown(self) -> None:
        """The provider shut down: it will call no more (the next one attaches again)."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _started(r: Running) -> float:
    return r.started


LIVE = LiveTrials()
"""This process's trials in flight. Process-wide like the agents' instrumentation it is fed
by (`Agent.instrument_all`); `Tracing` attaches it to the tracer provider it starts."""


class LiveLine:
    """A status line after the cursor of `out`, redrawn on change and every `interval` s."""

    def __init__(
        self,
        out: TextIO,
        running: Callable[[], list[Running]],
        columns: Callable[[], int],
        interval: float = 1.0,
    ) -> None:
        self._out = out
        self._running = running
        self._columns = columns
        self._lock = threading.Lock()
        self._shown = False
        self._drawn = False
        self._stop = threading.Event()
        self._ticker = threading.Thread(
            target=self._tick, args=(interval,), name="backintel-live", daemon=True
        )
        self._ticker.start()

    def _tick(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.refresh()

    def _erase(self) -> None:
        if self._drawn:
            self._out.write(_RESTORE + _CLEAR)
            self._drawn = False

    def refresh(self) -> None:
        """Redraw the line (while shown)."""
        with self._lock:
            if not self._shown:
                return
            text = status_line(self._running(), time.monotonic(), self._columns())
            self._erase()
            if text:
                self._out.write(f"{_SAVE} {text}")
                self._drawn = True
            self._out.flush()

    def show(self) -> None:
        """Draw from now on (pytest's output is flushed, the cursor where it left it)."""
        with self._lock:
            self._shown = True
        self.refresh()

    def hide(self) -> None:
        """Erase the line and stop drawing, before pytest writes."""
        with self._lock:
            self._shown = False
            self._erase()
            self._out.flush()

    def close(self) -> None:
        self.hide()
        self._stop.set()
        self._ticker.join(timeout=5)
