"""`lake-parquet`: per item a folder copy of the Parquet files, queried as DuckDB views.

Layout of one item: `<workdir>/<store id>/data/<table>.parquet` (copies, mode 0444) and
`<workdir>/<store id>/catalog.duckdb`, a database holding only views
`CREATE VIEW t AS SELECT * FROM read_parquet('<abs path>')`. The analyst opens the catalog
read-only with external file access limited to `data/` (`allowed_directories`) and the
configuration locked, so the views resolve but no other file can be read.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from stores.base import DatasetFiles, Store
from stores.capabilities import StoreCapabilities
from stores.engine.common import (
    quote_literal,
    template_dir,
)
from stores.engine.views import ProvisionedViews, provision_views

__all__ = ["LakeParquetStore"]


def _copy_parquet(parquet_dir: Path) -> Callable[[Path], None]:
    def build(target: Path) -> None:
        for path in sorted(parquet_dir.glob("*.parquet")):
            (target / path.name).write_bytes(path.read_bytes())

    return build


class LakeParquetStore(Store):
    """Parquet files in a per-item folder, exposed as views."""

    name = "lake-parquet"
    capabilities = StoreCapabilities(dialect="duckdb", reads_sqlite_file=False)

    def provision(self, dataset: DatasetFiles) -> ProvisionedViews:
        template = template_dir(
            self.workdir, dataset.parquet_dir, "lake-parquet", _copy_parquet(dataset.parquet_dir)
        )

        def view_for(path: Path) -> str | None:
            if path.suffix != ".parquet":
                return None
            return f"SELECT * FROM read_parquet({quote_literal(str(path.resolve()))})"

        return provision_views(self, template, view_for)
