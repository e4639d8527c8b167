"""The time limit on evidence re-run on the source: what the same statement took when the
analyst ran it in its own tool call, times `SOURCE_TIME_MULTIPLE`, never less than the store's
own statement limit, nor more than the answer's evidence budget (--evidence-timeout).

`StatementTimes` wraps the sessions an analyst is given and keeps, per statement text, the
longest run that finished. A statement the analyst never ran (or whose runs all failed) keeps
the store's limit, so an endless query ends as it always has (`unsupported_evidence`); one the
analyst ran in `t` seconds that does not finish in the limit on the re-run did not stop for
anything of the analyst's (the machine, the harness), so the trial is blocked
(`SourceTimeout`: `infra_error`, run again by --retry-blocked), never failed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from stores.base import MAX_RESULT_BYTES, MAX_ROWS, QueryResult, StoreError, StoreSession, TableInfo

__all__ = ["SOURCE_TIME_MULTIPLE", "SourceTimeout", "StatementTimes", "TimedSession"]

SOURCE_TIME_MULTIPLE = 10.0
"""A re-run on the source may take this many times what the analyst's own run took."""


class SourceTimeout(StoreError):
    """Evidence the analyst ran to completion did not finish when re-run on the source: the
    harness could not check it (the trial ends `infra_error`, blocked)."""


def _key(sql: str) -> str:
    return sql.strip().rstrip(";").strip()


class StatementTimes:
    """The seconds each statement took in the analyst's sessions (the longest finished run)."""

    def __init__(self, connect: Callable[[], StoreSession]) -> None:
        self._connect = connect
        self._lock = threading.Lock()
        self.seconds: dict[str, float] = {}

    def connect(self) -> StoreSession:
        """A session of the store whose statements are timed."""
        return TimedSession(self._connect(), self._ran)

    def _ran(self, sql: str, seconds: float) -> None:
        with self._lock:
            key = _key(sql)
            self.seconds[key] = max(seconds, self.seconds.get(key, 0.0))

    def took(self, sql: str) -> float | None:
        """What the analyst's run of `sql` took (None: it never finished one)."""
        with self._lock:
            return self.seconds.get(_key(sql))

    def limit(self, sql: str, floor_s: float, budget_s: float) -> float | None:
        """The limit on the re-run of `sql` (None: the store's own, the analyst never ran it)."""
        took = self.took(sql)
        if took is None:
            return None
        return max(floor_s, min(budget_s, SOURCE_TIME_MULTIPLE * took))


class TimedSession(StoreSession):
    """A store session that reports how long each statement that finished took."""

    def __init__(self, inner: StoreSession, ran: Callable[[str, float], None]) -> None:
        self._inner = inner
        self._ran = ran

    def list_tables(self) -> list[str]:
        return self._inner.list_tables()

    def describe_table(self, name: str) -> TableInfo:
        return self._inner.describe_table(name)

    def run_sql(
        self, sql: str, max_rows: int = MAX_ROWS, max_bytes: int = MAX_RESULT_BYTES
    ) -> QueryResult:
        started = time.monotonic()
        result = self._inner.run_sql(sql, max_rows, max_bytes)
        self._ran(sql, time.monotonic() - started)
        return result

    def tables_read(self, sql: str) -> set[str] | None:
        return self._inner.tables_read(sql)

    def set_time_limit(self, seconds: float) -> float | None:
        return self._inner.set_time_limit(seconds)

    def close(self) -> None:
        self._inner.close()
