"""The real-Olist loader on a tiny sample written in the release's exact CSV format.

The sample is the synthetic world at a small size, written as the nine release CSVs (quoted
ids and text, unquoted numbers and timestamps, empty fields for missing values, a BOM on the
translation file, a review message spanning lines) with its own checksum file.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from pytest_backintel.scenario import DatasetBinding
from scenarios.olist.generator import OlistConfig, generate
from scenarios.olist.oracles import ORACLES
from scenarios.olist.real import (
    CHECKSUM_FILE,
    GEOLOCATION_FILE,
    RELEASE_FILES,
    TABLE_FILES,
    ChecksumError,
    OlistRealWorld,
    OlistSourceError,
    load_real_olist,
    read_checksums,
    read_release,
    record_checksums,
    verify_release,
)
from scenarios.olist.world import OlistWorld
from scenarios.references import build_references, load_scenarios
from scenarios.worlds import OLIST_SOURCE_ENV, content_hash, get_world

SAMPLE_ORDERS = 700
"""Small, yet every scenario's population is non-empty."""
MULTILINE = 'Chegou "rapido".\r\nRecomendo a loja, nota 5'

# Per column: how the release writes it. q: quoted text, t: unquoted timestamp, i: integer,
# m: money with two decimals.
FORMATS: dict[str, str] = {
    "order_item_id": "i",
    "payment_sequential": "i",
    "payment_installments": "i",
    "review_score": "i",
    "product_name_lenght": "i",
    "product_description_lenght": "i",
    "product_photos_qty": "i",
    "product_weight_g": "i",
    "product_length_cm": "i",
    "product_height_cm": "i",
    "product_width_cm": "i",
    "price": "m",
    "freight_value": "m",
    "payment_value": "m",
}
TIMESTAMP_SUFFIXES = ("_timestamp", "_date", "_at")


def _cell(column: str, value: object) -> str:
    if value is None:
        return ""
    kind = FORMATS.get(column, "t" if column.endswith(TIMESTAMP_SUFFIXES) else "q")
    if kind == "m":
        assert isinstance(value, float)
        return f"{value:.2f}"
    if kind in "it":
        return str(value)
    return '"' + str(value).replace('"', '""') + '"'


def write_release_csv(df: pl.DataFrame, path: Path, *, quoted_header: bool = True) -> None:
    """One table in the release's CSV layout."""
    header = [f'"{c}"' if quoted_header else c for c in df.columns]
    lines = [",".join(header)]
    lines += [
        ",".join(_cell(c, v) for c, v in zip(df.columns, row, strict=True))
        for row in df.iter_rows()
    ]
    bom = "" if quoted_header else "\ufeff"
    path.write_bytes((bom + "\n".join(lines) + "\n").encode("utf-8"))


def sample_tables() -> dict[str, pl.DataFrame]:
    tables = generate(OlistConfig(orders=SAMPLE_ORDERS))
    reviews = tables["order_reviews"]
    tables["order_reviews"] = reviews.with_columns(
        pl.when(pl.int_range(pl.len()) == 0)
        .then(pl.lit(MULTILINE))
        .otherwise(pl.col("review_comment_message"))
        .alias("review_comment_message")
    )
    return tables


def write_sample(folder: Path, tables: dict[str, pl.DataFrame]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for table, name in TABLE_FILES.items():
        translation = table == "product_category_name_translation"
        write_release_csv(tables[table], folder / name, quoted_header=not translation)
    customers = tables["customers"]
    geo = pl.DataFrame(
        {
            "geolocation_zip_code_prefix": customers["customer_zip_code_prefix"].head(5),
            "geolocation_lat": [-23.54562128115268, -22.9, -19.9, -30.0, -25.4],
            "geolocation_lng": [-46.63929204800168, -43.2, -43.9, -51.2, -49.3],
            "geolocation_city": customers["customer_city"].head(5),
            "geolocation_state": customers["customer_state"].head(5),
        }
    )
    lines = ['"' + '","'.join(geo.columns) + '"']
    lines += [f'"{z}",{lat},{lng},"{city}","{st}"' for z, lat, lng, city, st in geo.iter_rows()]
    (folder / GEOLOCATION_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def tables() -> dict[str, pl.DataFrame]:
    return sample_tables()


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory, tables: dict[str, pl.DataFrame]) -> Path:
    folder = write_sample(tmp_path_factory.mktemp("release") / "olist", tables)
    record_checksums(folder, folder.parent / "sample.sha256")
    return folder


@pytest.fixture(scope="module")
def pins(sample: Path) -> Path:
    return sample.parent / "sample.sha256"


@pytest.fixture(scope="module")
def loaded(sample: Path, pins: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    data = tmp_path_factory.mktemp("data")
    files = load_real_olist(sample, data, checksums=pins)
    yield files.parquet_dir
    shutil.rmtree(data, ignore_errors=True)


# --- checksums ---------------------------------------------------------------------------------
def test_recorded_checksums_verify_and_match_sha256sum(sample: Path, pins: Path) -> None:
    digests = verify_release(sample, pins)
    assert sorted(digests) == sorted(RELEASE_FILES)
    if shutil.which("sha256sum"):
        done = subprocess.run(
            ["sha256sum", "-c", str(pins)], cwd=sample, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_a_tampered_file_is_rejected_naming_it(sample: Path, pins: Path, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(sample, tmp_path / "tampered"))
    target = copy / "olist_order_items_dataset.csv"
    target.write_bytes(target.read_bytes().replace(b",", b";", 1))
    expected = read_checksums(pins)["olist_order_items_dataset.csv"]
    with pytest.raises(ChecksumError) as err:
        load_real_olist(copy, tmp_path / "data", checksums=pins)
    message = str(err.value)
    assert "olist_order_items_dataset.csv" in message
    assert expected in message
    assert "actual" in message
    assert not (tmp_path / "data").exists()


def test_an_unpinned_file_is_rejected(sample: Path, pins: Path, tmp_path: Path) -> None:
    partial = tmp_path / "partial.sha256"
    partial.write_text(
        "".join(
            line + "\n" for line in pins.read_text().splitlines() if "olist_sellers" not in line
        )
    )
    with pytest.raises(ChecksumError, match=r"no pinned checksum for olist_sellers_dataset\.csv"):
        verify_release(sample, partial)


def test_the_committed_pin_file_is_strict(sample: Path) -> None:
    pinned = read_checksums(CHECKSUM_FILE)
    assert set(pinned) <= set(RELEASE_FILES)
    if set(pinned) != set(RELEASE_FILES):
        with pytest.raises(ChecksumError, match="--record-checksums"):
            verify_release(sample, CHECKSUM_FILE)
    else:  # pinned to the real release: the synthetic sample is not it
        with pytest.raises(ChecksumError, match="mismatch"):
            verify_release(sample, CHECKSUM_FILE)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("abc  olist_orders_dataset.csv", "64 lowercase hex"),
        ("0" * 64 + "  orders.csv", "not an Olist release file"),
    ],
)
def test_malformed_pin_lines_name_file_and_line(tmp_path: Path, line: str, problem: str) -> None:
    pins = tmp_path / "bad.sha256"
    pins.write_text(f"# comment\n{line}\n")
    with pytest.raises(ChecksumError, match=rf"bad\.sha256:2: .*{problem}"):
        read_checksums(pins)


def test_a_missing_release_file_is_named(sample: Path, pins: Path, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(sample, tmp_path / "missing"))
    (copy / GEOLOCATION_FILE).unlink()
    with pytest.raises(OlistSourceError, match=GEOLOCATION_FILE):
        verify_release(copy, pins)


# --- conversion ----------------------------------------------------------------------------------
def test_the_release_format_round_trips_exactly(
    loaded: Path, tables: dict[str, pl.DataFrame], tmp_path: Path
) -> None:
    for table, df in tables.items():
        df.write_parquet(tmp_path / f"{table}.parquet")
    assert content_hash(loaded) == content_hash(tmp_path)
    reviews = pl.read_parquet(loaded / "order_reviews.parquet")
    assert MULTILINE in reviews["review_comment_message"].to_list()


def _sqlite_schema(path: Path) -> dict[str, list[tuple[object, ...]]]:
    con = sqlite3.connect(path)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {n: con.execute(f'PRAGMA table_info("{n}")').fetchall() for n in sorted(names)}
    finally:
        con.close()


def test_the_loaded_world_has_the_synthetic_schema(
    loaded: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    synthetic = OlistWorld(OlistConfig(orders=60)).ensure_built(tmp_path_factory.mktemp("syn"))
    for path in sorted(synthetic.parquet_dir.glob("*.parquet")):
        assert pl.read_parquet_schema(loaded / path.name) == pl.read_parquet_schema(path)
    assert sorted(p.name for p in loaded.glob("*.parquet")) == sorted(
        p.name for p in synthetic.parquet_dir.glob("*.parquet")
    )
    assert synthetic.sqlite_path is not None
    real_sqlite = loaded.parent / "olist-real.sqlite"
    assert _sqlite_schema(real_sqlite) == _sqlite_schema(synthetic.sqlite_path)


def test_every_oracle_runs_and_agrees_with_its_check_sql(loaded: Path, pins: Path) -> None:
    world = OlistRealWorld(checksums=pins)
    files = world.ensure_built(loaded.parent.parent.parent)  # the build made by the fixture
    binding = DatasetBinding(world="olist-real")
    scenarios = [
        s.model_copy(update={"dataset": binding})
        for s in load_scenarios()
        if s.dataset.world == "olist"
    ]
    doc = build_references(scenarios, world, files)
    answered = {sid for sid, ref in doc["references"].items() if ref["values"] is not None}
    assert answered == {s.id for s in scenarios if s.answerable}
    assert all(s.oracle_name in ORACLES for s in scenarios if s.answerable)


def test_literal_release_rows_parse(tmp_path: Path) -> None:
    folder = tmp_path / "lit"
    folder.mkdir()
    header = ",".join(
        f'"{c}"'
        for c in [
            "customer_id",
            "customer_unique_id",
            "customer_zip_code_prefix",
            "customer_city",
            "customer_state",
        ]
    )
    (folder / TABLE_FILES["customers"]).write_text(
        header + '\n"06b8999e2fba1a1fbc88172c00ba8bc7","861eff4711a542e4b93843c6dd7febb0",'
        '"01151","sao paulo","SP"\n"x2","u2",1151,"franca","SP"\n'
    )
    from scenarios.olist.real import _read_csv

    df = _read_csv(folder / TABLE_FILES["customers"], "customers")
    assert df["customer_zip_code_prefix"].to_list() == ["01151", "01151"]


def test_bad_values_are_named_with_file_column_and_row(tmp_path: Path) -> None:
    from scenarios.olist.real import _read_csv

    path = tmp_path / TABLE_FILES["order_payments"]
    path.write_text(
        '"order_id","payment_sequential","payment_type","payment_installments",'
        '"payment_value"\n"a",1,"boleto",1,10.00\n"b",1,"boleto",one,5.00\n'
    )
    with pytest.raises(OlistSourceError, match=r"payment_installments.*data row 2.*'one'"):
        _read_csv(path, "order_payments")
    path.write_text(path.read_text().replace("one", "1").replace("10.00", "10.00x"))
    with pytest.raises(OlistSourceError, match="payment_value"):
        _read_csv(path, "order_payments")


def test_a_wrong_header_or_duplicate_key_is_refused(sample: Path, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(sample, tmp_path / "dupes"))
    sellers = copy / TABLE_FILES["sellers"]
    lines = sellers.read_text().splitlines()
    sellers.write_text("\n".join([*lines, lines[1]]) + "\n")
    with pytest.raises(OlistSourceError, match="must be present and unique"):
        read_release(copy)
    sellers.write_text("\n".join([lines[0].replace("seller_city", "city"), *lines[1:]]) + "\n")
    with pytest.raises(OlistSourceError, match="header"):
        read_release(copy)


# --- registry -----------------------------------------------------------------------------------
def test_world_olist_maps_to_the_real_release_on_request(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(OLIST_SOURCE_ENV, raising=False)
    assert isinstance(get_world("olist"), OlistWorld)
    monkeypatch.setenv(OLIST_SOURCE_ENV, "real")
    real = get_world("olist")
    assert isinstance(real, OlistRealWorld)
    assert isinstance(get_world("olist-real"), OlistRealWorld)
    with pytest.raises(OlistSourceError, match="backintel data olist --from DIR"):
        real.ensure_built(tmp_path)
    monkeypatch.setenv(OLIST_SOURCE_ENV, "kaggle")
    with pytest.raises(ValueError, match="allowed values are 'synthetic'"):
        get_world("olist")


# --- the same scenarios on the real release ---------------------------------------------------


def test_scenarios_run_on_the_loaded_release_with_references_computed_after_answering(
    pytester: pytest.Pytester, loaded: Path, pins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_backintel.collect.loading import DEFINITIONS_DIR

    data_dir = loaded
    while not (data_dir / "worlds").is_dir():
        data_dir = data_dir.parent
    monkeypatch.setenv("BACKINTEL_DATA_DIR", str(data_dir))
    monkeypatch.setenv("BACKINTEL_OLIST_SOURCE", "real")
    monkeypatch.setenv("BACKINTEL_OLIST_CHECKSUMS", str(pins))
    cases = "l1-delivered-orders or l1-distinct-persons or l2-repeat-purchasing"
    ok = pytester.runpytest_subprocess(str(DEFINITIONS_DIR), "-m", "development", "-k", cases)
    ok.assert_outcomes(passed=4)
    wrong = pytester.runpytest_subprocess(
        str(DEFINITIONS_DIR), "-m", "development", "-k", cases, "--analyst", "perturbed"
    )
    wrong.assert_outcomes(failed=4)
