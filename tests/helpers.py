"""Shared test data and helpers: a tiny SQLite orders store, a scripted counting analyst, and
the scenario files and run records several test modules use."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo

from analyst.agent import OUTPUT_TOOL_NAMES
from pytest_backintel.collect.loading import DEFINITIONS_DIR
from stores.base import DatasetFiles, ProvisionedStore
from stores.sqlite.store import SQLiteStore

__all__ = ["ANSWER", "CALIBRATION_CASES", "FEW", "SQL", "orders_store", "script", "shop_suite"]

FEW = [
    DEFINITIONS_DIR / "level1" / "l1-item-grain.scenario.yaml",
    DEFINITIONS_DIR / "level1" / "l1-orders-by-status.scenario.yaml",
    DEFINITIONS_DIR / "level3" / "l3-customer-age.scenario.yaml",
]
"""Three quick scenarios for in-process benchmark runs."""

SQL = "SELECT COUNT(*) AS n_orders FROM orders"
ANSWER = {
    "metrics": [{"name": "n_orders", "value": 2, "unit": "orders"}],
    "evidence": [{"id": "e1", "kind": "sql", "code": SQL, "metrics": ["n_orders"]}],
    "method": "count",
}
"""What `script` answers: two orders, cited by `SQL`."""

# development: controlled cases; regression: the original failures plus controls
CALIBRATION_CASES: list[dict[str, Any]] = [
    {"case": "delivered_orders", "level": 1, "family": "orders"},
    {"case": "repeat_person_share", "level": 2, "family": "repeat"},
    {"case": "missing_cost_profit", "level": 3, "family": "profit", "answerable": False},
    {"case": "original_missing_cost", "level": 3, "family": "profit", "answerable": False,
     "split": "regression"},
    {"case": "original_delivery_report", "level": 2, "family": "delivery", "split": "regression"},
    {"case": "control_delivered_orders", "level": 1, "family": "orders", "split": "regression"},
]  # fmt: skip
"""Run-record specs (for `reports.testing.record`) over both splits."""


def orders_store(folder: Path, rows: int) -> tuple[SQLiteStore, ProvisionedStore]:
    """A provisioned SQLite store `shop` in `folder` whose `orders(id)` has `rows` rows; the
    caller calls `teardown_session()` on the returned backend."""
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "shop.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE orders (id INTEGER)")
    conn.executemany("INSERT INTO orders VALUES (?)", [(i,) for i in range(rows)])
    conn.commit()
    conn.close()
    backend = SQLiteStore(folder / "stores")
    return backend, backend.provision(DatasetFiles("shop", folder, sqlite_path=db))


def shop_suite(pytester: Any, folder: str, suite: str, scenario: str) -> Path:
    """A user's project in `pytester.path`: `shop.sqlite` (orders 1 and 3 delivered, 2
    canceled), a pyproject, and the suite `folder` holding `suite` as its suite file and
    `scenario` as its one scenario, references built; returns the suite folder."""
    con = sqlite3.connect(pytester.path / "shop.sqlite")
    con.executescript(
        """
        CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL);
        INSERT INTO orders VALUES (1, 'delivered'), (2, 'canceled'), (3, 'delivered');
        """
    )
    con.commit()
    con.close()
    pytester.makepyprojecttoml('[project]\nname = "shop-bench"\nversion = "0.1.0"\n')
    path = pytester.path / folder
    path.mkdir()
    (path / "backintel-suite.yaml").write_text(suite)
    (path / "delivered-orders.scenario.yaml").write_text(scenario)
    built = pytester.run(Path(sys.executable).parent / "backintel", "references", "build")
    assert built.ret == 0, built.stderr.str()
    return path


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A FunctionModel script: list_tables, run_sql `SQL`, then `ANSWER`."""
    step = sum(isinstance(m, ModelResponse) for m in messages)
    calls = [ToolCallPart("list_tables", {}), ToolCallPart("run_sql", {"sql": SQL})]
    if step < len(calls):
        return ModelResponse(parts=[calls[step]])
    return ModelResponse(parts=[ToolCallPart(OUTPUT_TOOL_NAMES[0], ANSWER)])
