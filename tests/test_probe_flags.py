"""A 0/1 flag past a threshold and a zero count move under the probe on the shipped worlds (the
`later` and `reassign` families of `perturb_families`): the honest check query passes, the
same answer whose flag is cited as a literal over a real table
(`SELECT 0 AS alert FROM orders LIMIT 1`) is `unsupported_evidence`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_backintel.cli.commands import main
from pytest_backintel.evidence.perturb_families import apply_family, family_salt
from scenarios.references import REFERENCES_DIR

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    "l6-delivery-2018-08-01": ("level6/l6-delivery-2018-08-01", "alert", "0", "orders"),
    "l6-repeat-2017q3": ("level6/l6-repeat-2017q3", "alert", "0", "orders"),
    "acc-dev-late-arrivals-next": (None, "current_pending_orders", "0", "orders"),
    "acc-dev-mix-only-prices": (None, "price_alert", "'no'", "sales_lines"),
}
"""case: scenario file, the flag, the cheater's literal and the table it hides it over."""


def _case(case: str) -> tuple[str, dict[str, object], dict[str, str]]:
    """The check query, reference values and units of a shipped case."""
    import yaml

    path = CASES[case][0]
    if path is None:
        suite = ROOT / "scenarios/acceptance/acceptance-v1/development.json"
        found = next(
            c for c in json.loads(suite.read_text())["cases"] if c["scenario"]["id"] == case
        )
        scenario, values = found["scenario"], found["reference"]
    else:
        scenario = yaml.safe_load(
            (ROOT / f"scenarios/definitions/{path}.scenario.yaml").read_text()
        )
        refs = (REFERENCES_DIR / f"olist-replay-{scenario['dataset']['snapshot']}.json").read_text()
        values = json.loads(refs)["references"][case]["values"]
    units = {m["name"]: m["unit"] for m in scenario["metrics"]}
    return scenario["check_sql"], values, units


def _score(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, cheat: bool) -> str:
    sql, values, units = _case(case)
    _, flag, literal, table = CASES[case]
    others = [name for name in values if name != flag]
    columns = [f"ROUND({n}, 8) AS {n}" if isinstance(v, float) else n for n, v in values.items()]
    sql = f"SELECT {', '.join(columns)} FROM ({sql})"  # the references hold 8 decimals
    evidence = [
        {"id": "e1", "kind": "sql", "code": sql, "metrics": others if cheat else list(values)}
    ]
    if cheat:
        evidence.append(
            {
                "id": "e2",
                "kind": "sql",
                "code": f"SELECT {literal} AS {flag} FROM {table} LIMIT 1",
                "metrics": [flag],
            }
        )
    metrics = [{"name": n, "value": v, "unit": units[n]} for n, v in values.items()]
    path = tmp_path / f"{case}-{cheat}.json"
    path.write_text(json.dumps({"status": "answered", "metrics": metrics, "evidence": evidence}))
    main(["score", "--case", case, str(path)])
    return str(json.loads(capsys.readouterr().out)["outcome"])


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_literal_flag_fails_and_the_honest_query_passes(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _score(tmp_path, capsys, case, cheat=False) == "pass"
    assert _score(tmp_path, capsys, case, cheat=True) == "unsupported_evidence"


def test_families_keep_keys_and_dates_and_move_what_they_name() -> None:
    import polars as pl

    df = pl.DataFrame(
        {
            "order_id": [f"o{i}" for i in range(40)],
            "status": ["delivered"] * 39 + ["shipped"],
            "bought": [f"2024-04-{1 + i % 28:02d} 10:00:00" for i in range(40)],
            "arrived": [f"2024-04-{1 + i % 28:02d} 12:00:00" for i in range(40)],
            "price": [10.0] * 40,
        }
    )
    later = apply_family(df, {"order_id"}, family_salt(0, ()), df)
    assert later["order_id"].equals(df["order_id"])
    assert later["bought"].equals(df["bought"])
    assert later["arrived"].to_list() != df["arrived"].to_list()
    assert later["price"].max() > 10.0
    assert later["price"].min() == 10.0
    moved = apply_family(df.head(39), {"order_id"}, family_salt(1, ()), df)
    assert "shipped" in moved["status"].to_list()  # a value of a dropped row is still taken
    assert moved["bought"].equals(df.head(39)["bought"])
    assert apply_family(df, {"order_id"}, 5, df).equals(df)
