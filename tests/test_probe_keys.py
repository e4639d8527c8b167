"""The literal-evidence guard on a schema of your own with CamelCase declared keys and DECIMAL
money (a Chinook-like `Customer`/`Invoice`/`InvoiceLine`): a literal in a query over a real
table, a literal inside an aggregate and Python evidence that prints a literal are
`unsupported_evidence` on the sqlite, lake-parquet and postgres bindings, while the honest
query passes; a table with no usable key is named in the score, the records and `run.json`.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_own_data import backintel, postgres_source, pytest_run

CUSTOMERS = 59
INVOICES = 412
COUNTRIES = ("USA", "Canada", "France", "Brazil", "Germany")

SCENARIOS = {
    "usa-invoices": (
        "How many invoices were billed to the USA?",
        "usa_invoices",
        "count",
        "invoices",
        "SELECT COUNT(*) AS usa_invoices FROM Invoice WHERE BillingCountry = 'USA'",
    ),
    "largest-invoice": (
        "What is the largest invoice total?",
        "total",
        "currency",
        "USD",
        "SELECT MAX(Total) AS total FROM Invoice",
    ),
}
"""id: question, metric, kind, unit, the honest query."""


def rows() -> dict[str, list[tuple[object, ...]]]:
    """Deterministic rows: customers, invoices (totals with cents, some whole) and lines."""
    customers = [(i, f"Customer {i}", COUNTRIES[i % 5]) for i in range(1, CUSTOMERS + 1)]
    invoices, lines = [], []
    for i in range(1, INVOICES + 1):
        customer = customers[(i * 7) % CUSTOMERS]
        cents = (i * 3779) % 2500 + 99
        total = f"{cents // 100}.{cents % 100:02d}" if i % 9 else f"{cents // 100}.00"
        invoices.append((i, customer[0], customer[2], total))
        lines.append((2 * i - 1, i, total, 1))
        lines.append((2 * i, i, "0.99", 2))
    return {"Customer": customers, "Invoice": invoices, "InvoiceLine": lines}


DDL = [
    "CREATE TABLE Customer (CustomerId INTEGER PRIMARY KEY, FullName TEXT NOT NULL, "
    "Country TEXT NOT NULL)",
    "CREATE TABLE Invoice (InvoiceId INTEGER PRIMARY KEY, CustomerId INTEGER NOT NULL "
    "REFERENCES Customer (CustomerId), BillingCountry TEXT NOT NULL, Total DECIMAL(10,2) NOT NULL)",
    "CREATE TABLE InvoiceLine (InvoiceLineId INTEGER PRIMARY KEY, InvoiceId INTEGER NOT NULL "
    "REFERENCES Invoice (InvoiceId), UnitPrice NUMERIC(10,2) NOT NULL, Quantity INTEGER NOT NULL)",
]


def write_sqlite(path: Path) -> None:
    con = sqlite3.connect(path)
    for ddl in DDL:
        con.execute(ddl)
    for table, data in rows().items():
        marks = ", ".join("?" * len(data[0]))
        con.executemany(f"INSERT INTO {table} VALUES ({marks})", data)
    con.commit()
    con.close()


def write_parquet(folder: Path) -> None:
    """The same tables as Parquet files with DECIMAL(10,2) money (no declared keys)."""
    from decimal import Decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir()
    money = pa.decimal128(10, 2)
    types = {
        "Customer": [("CustomerId", pa.int64()), ("FullName", pa.string()),
                     ("Country", pa.string())],
        "Invoice": [("InvoiceId", pa.int64()), ("CustomerId", pa.int64()),
                    ("BillingCountry", pa.string()), ("Total", money)],
        "InvoiceLine": [("InvoiceLineId", pa.int64()), ("InvoiceId", pa.int64()),
                        ("UnitPrice", money), ("Quantity", pa.int64())],
    }  # fmt: skip
    for table, data in rows().items():
        schema = pa.schema(types[table])
        cols = list(zip(*data, strict=True))
        arrays = [
            pa.array([Decimal(v) for v in col] if t == money else col, type=t)  # type: ignore[arg-type]
            for col, (_, t) in zip(cols, types[table], strict=True)
        ]
        pq.write_table(pa.Table.from_arrays(arrays, schema=schema), folder / f"{table}.parquet")


@pytest.fixture
def chinook_postgres() -> Iterator[str]:
    """The same schema in a PostgreSQL database of its own (numeric(10,2) money)."""
    ddl = [d.replace("DECIMAL", "numeric").replace("NUMERIC", "numeric") for d in DDL]
    with postgres_source("chinook_src", ddl, rows()) as dsn:
        yield dsn


def project(folder: Path, binding: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text('[tool.pytest.ini_options]\npythonpath = ["."]\n')
    scenarios = folder / "scenarios"
    scenarios.mkdir()
    for sid, (question, metric, kind, unit, sql) in SCENARIOS.items():
        (scenarios / f"{sid}.scenario.yaml").write_text(
            f"id: {sid}\nversion: 1\ntitle: {sid}\nquestion: {question}\n"
            f"dataset: {binding}\nsplit: development\nlevel: 1\nfamily: invoices\n"
            f"answerable: true\nmetrics:\n  - {{name: {metric}, kind: {kind}, unit: {unit}}}\n"
            f'reference:\n  sql: "{sql}"\n'
        )
    return folder


def truth() -> dict[str, float]:
    con = sqlite3.connect(":memory:")
    for ddl in DDL:
        con.execute(ddl)
    for table, data in rows().items():
        con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(data[0]))})", data)
    out = {sid: con.execute(spec[4]).fetchone()[0] for sid, spec in SCENARIOS.items()}
    con.close()
    return out


def score(folder: Path, sid: str, value: float, kind: str, code: str) -> dict[str, object]:
    metric = SCENARIOS[sid][1]
    evidence = {"id": "e1", "kind": kind, "code": code, "metrics": [metric]}
    answer = {
        "status": "answered",
        "metrics": [{"name": metric, "value": value, "unit": SCENARIOS[sid][3]}],
        "evidence": [evidence],
    }
    return score_answer(folder, sid, answer)


def score_answer(folder: Path, sid: str, answer: dict[str, object]) -> dict[str, object]:
    """`backintel score` of `answer` for scenario `sid`: its JSON output."""
    path = folder / f"{sid}-{secrets.token_hex(3)}.json"
    path.write_text(json.dumps(answer))
    done = backintel(folder, "score", "--scenario", f"scenarios/{sid}.scenario.yaml", str(path))
    assert done.stdout, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def literals(value: float, metric: str, table: str = "Invoice") -> dict[str, tuple[str, str]]:
    return {
        "literal over a table": ("sql", f"SELECT {value} AS {metric} FROM {table} LIMIT 1"),
        "literal in an aggregate": ("sql", f"SELECT MAX({value}) AS {metric} FROM {table}"),
        "python printing a literal": (
            "python",
            f"import json\nprint(json.dumps({{{metric!r}: {value!r}}}))",
        ),
    }


def bind(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    write_sqlite(tmp_path / "chinook.sqlite")
    if kind == "sqlite":
        return "{sqlite: ../chinook.sqlite}"
    if kind == "parquet":
        write_parquet(tmp_path / "exports")
        return "{parquet: ../exports}"
    request.getfixturevalue("monkeypatch").setenv(
        "CHINOOK_DSN", request.getfixturevalue("chinook_postgres")
    )
    return "{postgres: CHINOOK_DSN}"


@pytest.mark.parametrize("kind", ["sqlite", "parquet", "postgres"])
def test_hidden_literals_are_unsupported_on_camelcase_keys_and_decimal_money(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    folder = project(tmp_path, bind(kind, tmp_path, request))
    build = backintel(folder, "references", "build")
    assert build.returncode == 0, build.stdout + build.stderr
    expected = truth()
    seen: dict[str, object] = {}
    for sid, (_, metric, _, _, sql) in SCENARIOS.items():
        value = float(expected[sid]) if SCENARIOS[sid][2] == "currency" else expected[sid]
        honest = score(folder, sid, value, "sql", sql)
        assert honest["outcome"] == "pass", honest
        assert honest["probe_gaps"] == [], honest["probe_gaps"]
        for what, (evidence_kind, code) in literals(value, metric).items():
            got = score(folder, sid, value, evidence_kind, code)
            seen[f"{sid}: {what}"] = got["outcome"]
            assert got["outcome"] == "unsupported_evidence", (what, got)
    print(kind, seen)


NO_KEY = """
CREATE TABLE Rate (Country TEXT NOT NULL, Vat REAL NOT NULL);
CREATE TABLE Note (Body TEXT NOT NULL);
"""


def test_a_table_with_no_usable_key_drops_rows_by_a_hash_of_the_whole_row(
    tmp_path: Path,
) -> None:
    """`Rate` and `Note` have no declared key, no id-like column and no foreign key: the probe
    drops their rows by a hash of the whole row, so a count of `Note` given as a literal is
    caught, no probe gap is named, and the run has no probe warning. (A table under
    `MIN_ROWS` rows keeps them on the usual probes; a scenario whose answer needs it moved gets
    a probe of its own, `tests/test_probe_moves.py`.)"""
    write_sqlite(tmp_path / "chinook.sqlite")
    con = sqlite3.connect(tmp_path / "chinook.sqlite")
    con.executescript(NO_KEY)
    con.executemany("INSERT INTO Rate VALUES (?, ?)", [(c, 0.2) for c in COUNTRIES])
    con.executemany("INSERT INTO Note VALUES (?)", [(f"note {i}",) for i in range(9)])
    con.commit()
    con.close()
    folder = project(tmp_path, "{sqlite: ../chinook.sqlite}")
    (folder / "scenarios" / "note-count.scenario.yaml").write_text(
        "id: note-count\nversion: 1\ntitle: t\nquestion: How many notes?\n"
        "dataset: {sqlite: ../chinook.sqlite}\nsplit: development\nlevel: 1\n"
        "family: invoices\nanswerable: true\nmetrics:\n  - {name: n, kind: count, "
        "unit: rows}\nreference:\n  sql: SELECT COUNT(*) AS n FROM Note\n"
    )
    assert backintel(folder, "references", "build").returncode == 0
    for code in ("SELECT 9 AS n FROM Note LIMIT 1", "SELECT COUNT(*) AS n FROM Note"):
        answer = {
            "status": "answered",
            "metrics": [{"name": "n", "value": 9, "unit": "rows"}],
            "evidence": [{"id": "e1", "kind": "sql", "code": code, "metrics": ["n"]}],
        }
        path = folder / f"note-{secrets.token_hex(3)}.json"
        path.write_text(json.dumps(answer))
        done = backintel(
            folder, "score", "--scenario", "scenarios/note-count.scenario.yaml", str(path)
        )
        got = json.loads(done.stdout)
        honest = code.startswith("SELECT COUNT")
        assert got["outcome"] == ("pass" if honest else "unsupported_evidence"), (code, got)
        assert got["probe_gaps"] == [], got["probe_gaps"]

    run = pytest_run(folder, "--run-id", "r")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "WARNING: the data probe of" not in run.stdout
    summary = json.loads((folder / "results/r/run.json").read_text())
    assert summary["probe_gaps"] == []


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("id", True),
        ("Id", True),
        ("ID", True),
        ("customer_id", True),
        ("CustomerId", True),
        ("CustomerID", True),
        ("l_orderkey", True),
        ("OrderKey", True),
        ("paid", False),
        ("valid", False),
        ("Total", False),
        ("idea", False),
    ],
)
def test_key_names_in_every_common_form(name: str, expected: bool) -> None:
    from stores.common.view_plan import id_like

    assert id_like(name) is expected


def test_a_link_tables_id_like_columns_together_are_its_key() -> None:
    """No declared key and no unique id-like column: the id-like columns together (a link
    table's composite key) identify a row; without any, the table has no key."""
    import polars as pl

    from pytest_backintel.evidence.perturb import entity_key
    from stores.common.view_plan import key_names

    link = pl.DataFrame({"PlaylistId": [1, 1, 2, 2], "TrackId": [1, 2, 1, 2], "Pos": [1, 2, 1, 2]})
    assert entity_key(link, key_names("PlaylistTrack", link.columns), None) == [
        "PlaylistId",
        "TrackId",
    ]
    assert entity_key(link, key_names("PlaylistTrack", link.columns), ["Pos", "TrackId"]) == [
        "Pos",
        "TrackId",
    ]
    plain = pl.DataFrame({"Country": ["a", "b"], "Vat": [0.1, 0.2]})
    assert entity_key(plain, key_names("Rate", plain.columns), None) == []


def test_a_check_query_the_probe_cannot_answer_marks_the_answer_unguarded(
    tmp_path: Path,
) -> None:
    """A reference query that gives no row on the probe (its `HAVING` holds only on the
    source's own count) leaves nothing to compare the evidence with there: the literal is let
    through, and the score says the answer is unguarded, not that it was checked."""
    write_sqlite(tmp_path / "chinook.sqlite")
    folder = project(tmp_path, "{sqlite: ../chinook.sqlite}")
    value = truth()["usa-invoices"]
    path = folder / "scenarios" / "usa-invoices.scenario.yaml"
    path.write_text(path.read_text().replace("'USA'", f"'USA' HAVING COUNT(*) = {value}"))
    assert backintel(folder, "references", "build").returncode == 0
    got = score(
        folder, "usa-invoices", value, "sql", f"SELECT {value} AS usa_invoices FROM Invoice LIMIT 1"
    )
    assert got["outcome"] == "pass", got
    assert got["probe_gaps"] == [], got
    unguarded = got["probe_unguarded"]
    assert isinstance(unguarded, str), got
    assert unguarded.startswith("evidence is not checked against moved data: usa_invoices")


def test_every_numeric_type_outside_keys_is_rescaled_and_keeps_its_type() -> None:
    """FLOAT, DOUBLE and DECIMAL columns move (a DECIMAL keeps its precision and scale);
    keys and integer counts do not."""
    from decimal import Decimal

    import polars as pl

    from pytest_backintel.evidence.perturb import perturb_tables

    n = 40
    invoice = pl.DataFrame(
        {
            "InvoiceId": list(range(1, n + 1)),
            "Quantity": [3] * n,
            "Total": pl.Series([Decimal("12.34")] * n, dtype=pl.Decimal(10, 2)),
            "Rate": pl.Series([0.5] * n, dtype=pl.Float32),
            "Weight": [2.5] * n,
        }
    )
    out = perturb_tables({"Invoice": invoice}, salt=1)["Invoice"]
    assert out.schema == invoice.schema
    assert 0 < out.height < n
    assert out["Quantity"].unique().to_list() == [3]
    kept = invoice.filter(pl.col("InvoiceId").is_in(out["InvoiceId"].implode()))
    for col in ("Total", "Rate", "Weight"):
        assert (out[col].cast(pl.Float64) > kept[col].cast(pl.Float64)).all(), col
    assert out["InvoiceId"].to_list() == kept["InvoiceId"].to_list()
