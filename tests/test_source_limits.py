"""Evidence re-run on the source may take what the analyst's own run of the same statement took,
times a multiple (issue 40): a re-run that still cannot finish is the harness's failure
(`infra_error`, blocked, naming --retry-blocked), never `unsupported_evidence`; a statement the
analyst never finished keeps the store's limit and ends as it always has. The slow source is
forced by a multiple and floor of zero, as a re-run on a loaded machine slower than the
analyst's run by any multiple would be."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_hostile_limits import SCENARIO, three_orders

import pytest_backintel.evidence.probe as probe
import pytest_backintel.evidence.source_limit as source_limit
from pytest_backintel.analyst_api import AnalystLimits, AnalystRun, AnalystTask
from pytest_backintel.contract import AnalystAnswer, Evidence, MetricValue
from pytest_backintel.run.trial import TrialResult, run_trial
from stores.base import ProvisionedStore, QueryError

ROWS = 100_000
COUNT = {
    "sqlite": "WITH RECURSIVE r(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM r WHERE k < "
    f"{ROWS}) SELECT count(*) AS n FROM r, orders",
    "lake-parquet": f"SELECT count(*) AS n FROM generate_series(1, {ROWS}) AS g, orders",
    "postgres": f"SELECT count(*) AS n FROM generate_series(1, {ROWS}) AS g, orders",
}
"""A statement that takes some time (every row of a series against every order)."""
ENDLESS = (
    "WITH RECURSIVE r(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM r) "
    "SELECT count(*) AS n FROM r, orders"
)


class RunsThenCites:
    """Runs `sql` in its own session (as an analyst's tool call does), then cites it."""

    name, kind = "runs-then-cites", "custom"

    def __init__(self, sql: str) -> None:
        self.sql = sql

    def answer(self, task: AnalystTask) -> AnalystRun:
        with task.connect() as session:
            try:
                value = session.run_sql(self.sql).rows[0][0]
            except QueryError:  # its own run did not finish: it reports what it believes
                value = 3 * ROWS
        return AnalystRun(
            AnalystAnswer(
                metrics=[MetricValue(name="n", value=value, unit="rows")],
                evidence=[Evidence(id="e1", kind="sql", code=self.sql, metrics=["n"])],
            )
        )


@pytest.fixture(scope="module", params=sorted(COUNT))
def item(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, ProvisionedStore]]:
    root = tmp_path_factory.mktemp(f"source-limits-{request.param}")
    for provisioned in three_orders(request.param, root):
        yield request.param, provisioned


def trial(item: ProvisionedStore, sql: str) -> TrialResult:
    limits = AnalystLimits(wall_time_s=60)
    return run_trial(SCENARIO, 1, item, RunsThenCites(sql), limits, lambda _: {"n": 3 * ROWS})


def _no_time_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source_limit, "SOURCE_TIME_MULTIPLE", 0.0)
    monkeypatch.setattr(probe, "PROBE_TIME_FLOOR_S", 0.0)


def test_a_right_answer_passes_at_the_normal_limit(item: tuple[str, ProvisionedStore]) -> None:
    kind, store = item
    record = trial(store, COUNT[kind]).to_record()
    assert record["outcome"] == "pass", record["reasons"]


def test_a_re_run_slower_than_the_analysts_own_run_blocks_the_trial(
    item: tuple[str, ProvisionedStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    kind, store = item
    _no_time_at_all(monkeypatch)
    record = trial(store, COUNT[kind]).to_record()
    assert record["outcome"] == "infra_error", record["reasons"]
    (reason,) = record["reasons"]
    message = reason["message"]
    assert "did not finish when re-run on the source" in message, message
    assert "analyst's own run of it took" in message
    assert "blocked (infra_error), not failed" in message
    assert "--retry-blocked" in message


def test_an_endless_query_the_analyst_could_not_finish_is_unsupported(
    item: tuple[str, ProvisionedStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, store = item
    _no_time_at_all(monkeypatch)  # its re-run keeps the store's own limit all the same
    record = trial(store, ENDLESS).to_record()
    assert record["outcome"] == "unsupported_evidence", record["reasons"]
    (evidence,) = record["evidence"]
    assert "limit" in str(evidence["error"]), evidence


def test_statement_times_keep_the_longest_finished_run() -> None:
    times = source_limit.StatementTimes(lambda: None)  # type: ignore[arg-type,return-value]
    times._ran("SELECT 1 ;", 0.5)
    times._ran("SELECT 1", 0.2)
    assert times.took(" SELECT 1") == 0.5
    assert times.limit("SELECT 1", 10.0, 120.0) == 10.0
    times._ran("SELECT 2", 3.0)
    assert times.limit("SELECT 2", 10.0, 120.0) == 30.0
    assert times.limit("SELECT 2", 10.0, 20.0) == 20.0, "never past the evidence budget"
    assert times.limit("SELECT 3", 10.0, 120.0) is None, "never run: the store's own limit"
