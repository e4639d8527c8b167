"""The run's pass rates with their intervals as JUnit testsuite properties.

Called after the test loop and before pytest writes `--junitxml` (its writer runs in
`pytest_sessionfinish`, before the session's records are merged), so the controller reads every
part file written so far, superseded attempts left out.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_backintel.records.attempts import final_rows
from pytest_backintel.records.html_report import junit_run_properties
from pytest_backintel.records.writer import read_json_lines
from pytest_backintel.run._compat import junit_xml

__all__ = ["add_junit_rates"]


def add_junit_rates(config: pytest.Config, run_dir: Path, is_controller: bool) -> None:
    """Add `backintel_pass_rate*` testsuite properties when `--junitxml` is given."""
    xml = junit_xml(config)
    if xml is None or not is_controller or not (run_dir / "parts").is_dir():
        return
    rows = [
        row
        for part in sorted((run_dir / "parts").glob("records-*.jsonl"))
        for row in read_json_lines(part)
    ]
    for name, value in junit_run_properties([record for record, _ in final_rows(rows)]):
        xml.add_global_property(name, value)
