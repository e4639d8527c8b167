"""The public Olist CSV release as the world `olist-real`: verified by pinned SHA-256, then
converted into the synthetic world's canonical layout (same tables, columns, types and keys).

The nine release files are checked against `olist-release.sha256` (sha256sum format, one
`<digest>  <file name>` line per file) before anything is read; an unknown or mismatched
digest is an error naming the file, the expected and the actual digest. The maintainer pins
the digests once from a trusted download with `backintel data olist --from DIR
--record-checksums` (`record_checksums`) and commits the file. The geolocation file is verified
but not loaded: the synthetic world, and so every scenario, has no geolocation table.

Conversion: every field is read as text; empty fields are missing values (NULL); zip-code
prefixes are five-character strings (leading zeros restored); counts are integers; money is a
float with two decimals; timestamps stay `YYYY-MM-DD HH:MM:SS` text and must parse.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

import polars as pl

from scenarios.olist.schema import SCHEMAS
from scenarios.olist.world import OlistWorld
from scenarios.references import ReferencedWorld
from scenarios.world_base import Oracle
from stores.base import DatasetFiles

__all__ = [
    "CHECKSUM_FILE",
    "GEOLOCATION_FILE",
    "RECORD_HINT",
    "RELEASE_FILES",
    "TABLE_FILES",
    "ChecksumError",
    "OlistRealWorld",
    "OlistSourceError",
    "file_sha256",
    "load_real_olist",
    "read_checksums",
    "read_release",
    "record_checksums",
    "verify_release",
]

HERE = Path(__file__).resolve().parent
CHECKSUM_FILE = HERE / "olist-release.sha256"
LOADER_VERSION = 1
TABLE_FILES: dict[str, str] = {
    "orders": "olist_orders_dataset.csv",
    "order_items": "olist_order_items_dataset.csv",
    "customers": "olist_customers_dataset.csv",
    "order_payments": "olist_order_payments_dataset.csv",
    "order_reviews": "olist_order_reviews_dataset.csv",
    "products": "olist_products_dataset.csv",
    "sellers": "olist_sellers_dataset.csv",
    "product_category_name_translation": "product_category_name_translation.csv",
}
GEOLOCATION_FILE = "olist_geolocation_dataset.csv"
RELEASE_FILES = (*sorted(TABLE_FILES.values()), GEOLOCATION_FILE)
RECORD_HINT = (
    "a maintainer pins the digests from a trusted copy with "
    "`backintel data olist --from DIR --record-checksums` and commits the file"
)
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S"
_LINE = re.compile(r"^([0-9a-f]{64}) [ *](\S.*)$")


class OlistSourceError(ValueError):
    """The release files are missing, malformed, or not loaded yet."""


class ChecksumError(OlistSourceError):
    """A release file's digest is not pinned or differs from the pinned one."""


def file_sha256(path: Path) -> str:
    """The SHA-256 hex digest of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_checksums(checksum_file: Path = CHECKSUM_FILE) -> dict[str, str]:
    """File name -> pinned digest; `#` comments and blank lines are skipped."""
    if not checksum_file.is_file():
        raise ChecksumError(f"no checksum file {checksum_file}; {RECORD_HINT}")
    pinned: dict[str, str] = {}
    for n, raw in enumerate(checksum_file.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise ChecksumError(
                f"{checksum_file}:{n}: expected '<64 lowercase hex digits>  <file name>', "
                f"got {raw!r}"
            )
        digest, name = match.groups()
        if name not in RELEASE_FILES:
            raise ChecksumError(
                f"{checksum_file}:{n}: {name!r} is not an Olist release file; allowed: "
                + ", ".join(RELEASE_FILES)
            )
        if name in pinned:
            raise ChecksumError(f"{checksum_file}:{n}: {name!r} is pinned twice")
        pinned[name] = digest
    return pinned


def _present(src_dir: Path) -> None:
    missing = [name for name in RELEASE_FILES if not (src_dir / name).is_file()]
    if missing:
        raise OlistSourceError(
            f"{src_dir} lacks Olist release file(s) {', '.join(missing)}; the folder must hold "
            f"all nine: {', '.join(RELEASE_FILES)}"
        )


def verify_release(src_dir: Path, checksum_file: Path = CHECKSUM_FILE) -> dict[str, str]:
    """Check all nine release files against the pinned digests; returns name -> digest."""
    _present(src_dir)
    pinned = read_checksums(checksum_file)
    actual: dict[str, str] = {}
    for name in RELEASE_FILES:
        digest = file_sha256(src_dir / name)
        expected = pinned.get(name)
        if expected is None:
            raise ChecksumError(
                f"{src_dir / name}: no pinned checksum for {name} in {checksum_file} (actual "
                f"sha256 {digest}); unverified data is not used; {RECORD_HINT}"
            )
        if digest != expected:
            raise ChecksumError(
                f"{src_dir / name}: checksum mismatch for {name}: expected sha256 {expected} "
                f"(pinned in {checksum_file}), actual {digest}; the file is corrupt, modified "
                "or from another release"
            )
        actual[name] = digest
    return actual


def record_checksums(src_dir: Path, checksum_file: Path = CHECKSUM_FILE) -> dict[str, str]:
    """Pin the digests of the nine release files in `src_dir` (maintainer step, trusted copy)."""
    _present(src_dir)
    digests = {name: file_sha256(src_dir / name) for name in RELEASE_FILES}
    lines = [
        "# SHA-256 of the public Olist release files (Brazilian E-Commerce Public Dataset by",
        "# Olist), sha256sum format. Recorded by `backintel data olist --from DIR",
        "# --record-checksums`; `backintel data olist --from DIR` refuses any other bytes.",
        *(f"{digests[name]}  {name}" for name in RELEASE_FILES),
    ]
    checksum_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return digests


_TIMESTAMPS: dict[str, tuple[str, ...]] = {
    "orders": tuple(
        c
        for c in SCHEMAS["orders"]
        if c.startswith("order_") and c not in ("order_id", "order_status")
    ),
    "order_items": ("shipping_limit_date",),
    "order_reviews": ("review_creation_date", "review_answer_timestamp"),
}


def _fail(path: Path, column: str, df: pl.DataFrame, bad: pl.Expr, allowed: str) -> None:
    rows = df.with_row_index("row").filter(bad)
    if rows.height:
        first = rows.row(0, named=True)
        raise OlistSourceError(
            f"{path}: column {column!r}, data row {first['row'] + 1}: {first[column]!r} is not "
            f"{allowed} ({rows.height} such value(s))"
        )


def _convert(path: Path, table: str, raw: pl.DataFrame) -> pl.DataFrame:
    """One CSV's text columns as the canonical schema's types, validated."""
    schema = SCHEMAS[table]
    out: list[pl.Series] = []
    for column, dtype in schema.items():
        text = raw[column]
        value = pl.col(column)
        if dtype == pl.Int64 or dtype == pl.Float64:
            number = value.str.strip_chars().cast(pl.Float64, strict=False)
            _fail(path, column, raw, value.is_not_null() & number.is_null(), "a number")
            if dtype == pl.Int64:
                _fail(
                    path,
                    column,
                    raw,
                    number.is_not_null() & (number != number.round(0)),
                    "a whole number",
                )
                number = number.round(0).cast(pl.Int64)
            out.append(raw.select(number.alias(column)).to_series())
        elif column.endswith("zip_code_prefix"):
            out.append(text.str.strip_chars().str.zfill(5))
        elif column in _TIMESTAMPS.get(table, ()):
            parsed = value.str.to_datetime(TIMESTAMP_FORMAT, strict=False)
            _fail(
                path,
                column,
                raw,
                value.is_not_null() & parsed.is_null(),
                f"a timestamp formatted {TIMESTAMP_FORMAT}",
            )
            out.append(text)
        else:
            out.append(text)
    return pl.DataFrame(out).cast(dict(schema))  # type: ignore[arg-type]


def _read_csv(path: Path, table: str) -> pl.DataFrame:
    try:
        raw = pl.read_csv(path, infer_schema=False, encoding="utf8")
    except (pl.exceptions.PolarsError, UnicodeDecodeError) as exc:
        raise OlistSourceError(f"{path}: not a readable UTF-8 CSV file ({exc})") from exc
    raw = raw.rename({c: c.lstrip("\ufeff").strip() for c in raw.columns})
    expected = list(SCHEMAS[table])
    if raw.columns != expected:
        raise OlistSourceError(
            f"{path}: header {raw.columns} differs from the Olist release's {expected}"
        )
    raw = raw.with_columns(pl.col(c).replace("", None) for c in raw.columns)
    return _convert(path, table, raw)


def _check_keys(path: Path, table: str, df: pl.DataFrame) -> None:
    key = list(OlistWorld.primary_keys.get(table, ()))
    if not key:
        return
    nulls = df.filter(pl.any_horizontal(pl.col(k).is_null() for k in key))
    dupes = df.filter(pl.struct(key).is_duplicated())
    if nulls.height or dupes.height:
        example = (nulls if nulls.height else dupes).select(key).row(0)
        raise OlistSourceError(
            f"{path}: key {key} must be present and unique; {nulls.height} row(s) lack it, "
            f"{dupes.height} row(s) repeat one (e.g. {example})"
        )


def read_release(src_dir: Path) -> dict[str, pl.DataFrame]:
    """The eight tables of a release folder in canonical form (call `verify_release` first)."""
    tables: dict[str, pl.DataFrame] = {}
    for table, name in sorted(TABLE_FILES.items()):
        df = _read_csv(src_dir / name, table)
        _check_keys(src_dir / name, table, df)
        tables[table] = df
    return tables


class OlistRealWorld(ReferencedWorld):
    """The real Olist release, loaded by `load_real_olist` into the synthetic world's layout."""

    name = "olist-real"
    primary_keys: ClassVar[Mapping[str, tuple[str, ...]]] = OlistWorld.primary_keys
    foreign_keys: ClassVar[Mapping[str, tuple[tuple[str, str, str], ...]]] = OlistWorld.foreign_keys

    def __init__(self, source: Path | None = None, checksums: Path = CHECKSUM_FILE) -> None:
        self.source = source
        self.checksums = checksums

    @property
    def config(self) -> dict[str, int]:
        return {"loader": LOADER_VERSION}

    def code_fingerprint(self) -> str:
        """The loader, the schema and the pinned digests: other pins mean another build."""
        digest = hashlib.sha256()
        for path in (Path(__file__), HERE / "schema.py"):
            digest.update(path.read_bytes())
        if self.checksums.is_file():
            digest.update(self.checksums.read_bytes())
        return digest.hexdigest()[:16]

    def generate(self, snapshot: str) -> dict[str, pl.DataFrame]:
        self._check_snapshot(snapshot)
        if self.source is None:
            raise OlistSourceError(
                "the real Olist data is not loaded into this data directory (or the pinned "
                f"checksums in {self.checksums} changed since); load it with "
                "`backintel data olist --from DIR` (DIR holding the nine release CSVs)"
            )
        verify_release(self.source, self.checksums)
        return read_release(self.source)

    @property
    def oracles(self) -> Mapping[str, Oracle]:
        from scenarios.olist.oracles import ORACLES

        return ORACLES


def load_real_olist(
    src_dir: Path, data_dir: Path, *, checksums: Path = CHECKSUM_FILE
) -> DatasetFiles:
    """Verify the release in `src_dir` and build world `olist-real` under `data_dir`.

    Always verifies, even when a build exists; returns the build's Parquet and SQLite files."""
    src_dir = Path(src_dir)
    verify_release(src_dir, checksums)
    return OlistRealWorld(src_dir, checksums).ensure_built(Path(data_dir))
