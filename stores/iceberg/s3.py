"""`iceberg-s3`: Iceberg tables whose metadata and Parquet live in an S3-compatible bucket.

The endpoint is the user's (`BACKINTEL_S3_ENDPOINT` and friends, `stores.iceberg.s3_endpoint`) or a
local moto server started by `setup_session` on 127.0.0.1. Per item: warehouse
`s3://<bucket>/<store id>/`, written through a pyiceberg SQL catalog (SQLite-backed, in the local
item folder `<workdir>/<store id>/iceberg.db`; one append per table: one snapshot), and a local
`catalog.duckdb` of views `SELECT * FROM iceberg_scan('s3://.../metadata.json')`.

The analyst's DuckDB connection loads `httpfs`, `avro` and `iceberg` from their wheels, gets the
credentials as a temporary S3 secret scoped to the item's prefix (created before the
configuration is locked, so it can be neither read back unredacted nor replaced by a SET), may
read under `s3://<bucket>/<store id>/` only (`allowed_directories`; external access otherwise
off), and is refused any statement but one SELECT (`check_statement`) and any call of
`duckdb_secrets` or `which_secret` (read from DuckDB's own parse tree, `json_serialize_sql`).

Fingerprint: logical over the views' rows (as `iceberg`); physical is a sha256 over the local
files, every object under the item's prefix (key and content hash) and each table's metadata
location and current snapshot id.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq

from stores.base import (
    MAX_RESULT_BYTES,
    MAX_ROWS,
    DatasetFiles,
    QueryRefused,
    QueryResult,
    Store,
    StoreError,
    new_store_id,
)
from stores.capabilities import StoreCapabilities
from stores.engine.common import (
    BASE_CONFIG,
    DuckDBSession,
    FolderItem,
    quote_ident,
    quote_literal,
    remove_folder,
    tree_sha256,
)
from stores.engine.extensions import load_extensions, open_guarded_with
from stores.engine.policy import serialized_sql
from stores.engine.views import CATALOG
from stores.iceberg.s3_endpoint import MotoServer, S3Endpoint, endpoint_from_env
from stores.iceberg.store import ICEBERG_DB, NAMESPACE, snapshot_ids

__all__ = ["IcebergS3Store", "ProvisionedIcebergS3", "S3Session"]

EXTENSIONS = ("httpfs", "avro", "iceberg")
SECRET = "backintel_s3"
_HIDDEN = re.compile(r'"function_name":"(duckdb_secrets|which_secret)"', re.IGNORECASE)


def create_secret(conn: duckdb.DuckDBPyConnection, endpoint: S3Endpoint, prefix: str) -> None:
    """The item's credentials as a temporary S3 secret scoped to `prefix` (`s3://b/p/`)."""
    options = {
        "TYPE": "S3",
        "KEY_ID": quote_literal(endpoint.key_id),
        "SECRET": quote_literal(endpoint.secret),
        "REGION": quote_literal(endpoint.region),
        "ENDPOINT": quote_literal(endpoint.host),
        "URL_STYLE": "'path'",
        "USE_SSL": "true" if endpoint.use_ssl else "false",
        "SCOPE": quote_literal(prefix),
    }
    body = ", ".join(f"{k} {v}" for k, v in options.items())
    conn.execute(f"CREATE TEMPORARY SECRET {SECRET} ({body})")


class S3Session(DuckDBSession):
    """A guarded DuckDB session that also refuses reading its own secret's details."""

    def run_sql(
        self, sql: str, max_rows: int = MAX_ROWS, max_bytes: int = MAX_RESULT_BYTES
    ) -> QueryResult:
        try:
            tree = serialized_sql(self._conn, sql)
        except duckdb.Error:
            tree = None
        if tree is not None and _HIDDEN.search(tree):
            raise QueryRefused(
                "duckdb_secrets() and which_secret() are refused: the store's credentials are "
                "not the analyst's to read"
            )
        return super().run_sql(sql, max_rows, max_bytes)


class ProvisionedIcebergS3(FolderItem):
    """A warehouse prefix in the bucket, its local catalog and the analyst's view catalog."""

    def __init__(self, store: IcebergS3Store, store_id: str, root: Path) -> None:
        super().__init__(store.name, store_id, root, store.statement_timeout_s)
        self.endpoint = store.endpoint
        self.prefix = f"s3://{self.endpoint.bucket}/{store_id}/"

    def _open(self) -> duckdb.DuckDBPyConnection:
        def prepare(conn: duckdb.DuckDBPyConnection) -> None:
            create_secret(conn, self.endpoint, self.prefix)
            conn.execute(f"SET allowed_directories = [{quote_literal(self.prefix)}]")

        return open_guarded_with(self.root / CATALOG, extensions=EXTENSIONS, prepare=prepare)

    def local_session(self) -> S3Session:
        """The guarded session in this process (`connect` runs it in a child process)."""
        return S3Session(self.engine_connection(), timeout_s=self._timeout_s, where=self.display_id)

    def objects(self) -> list[str]:
        """Every object key under the item's prefix (`<bucket>/<store id>/...`), sorted."""
        from pyarrow import fs

        selector = fs.FileSelector(
            f"{self.endpoint.bucket}/{self.store_id}", recursive=True, allow_not_found=True
        )
        infos = self.endpoint.filesystem().get_file_info(selector)
        return sorted(i.path for i in infos if i.type == fs.FileType.File)

    def snapshot_ids(self) -> dict[str, tuple[str, int | None]]:
        """Table -> (metadata location, current snapshot id), from the catalog and the bucket."""
        filesystem = self.endpoint.filesystem()

        def read(location: str) -> bytes:
            with filesystem.open_input_stream(location.removeprefix("s3://")) as f:
                data: bytes = f.read()
                return data

        return snapshot_ids(self.root, read)

    def _physical(self) -> str:
        digest = hashlib.sha256(tree_sha256(self.root).encode())
        try:
            filesystem = self.endpoint.filesystem()
            for key in self.objects():
                with filesystem.open_input_stream(key) as f:
                    digest.update(f"{key}\0{hashlib.sha256(f.read()).hexdigest()}\0".encode())
        except OSError as exc:
            raise StoreError(f"{self.display_id}: cannot hash the bucket: {exc}") from exc
        digest.update(json.dumps(self.snapshot_ids(), sort_keys=True).encode())
        return digest.hexdigest()

    def teardown(self) -> None:
        remove_folder(self.root)
        with contextlib.suppress(OSError):
            self.endpoint.filesystem().delete_dir(f"{self.endpoint.bucket}/{self.store_id}")


class IcebergS3Store(Store):
    """Each item gets its own warehouse prefix in an S3-compatible bucket."""

    name = "iceberg-s3"
    capabilities = StoreCapabilities(
        dialect="duckdb", server="S3 (moto, or BACKINTEL_S3_ENDPOINT)", reads_sqlite_file=False
    )

    def __init__(self, workdir: Path, *, statement_timeout_s: float | None = None) -> None:
        super().__init__(workdir, statement_timeout_s=statement_timeout_s)
        self._endpoint: S3Endpoint | None = None
        self._server: MotoServer | None = None
        self._created: set[str] = set()

    @property
    def endpoint(self) -> S3Endpoint:
        if self._endpoint is None:
            raise StoreError("iceberg-s3 store: call setup_session() before provisioning")
        return self._endpoint

    def setup_session(self) -> None:
        super().setup_session()
        if self._endpoint is not None:
            return
        endpoint = endpoint_from_env()
        if endpoint is None:
            self._server = MotoServer(self.workdir)
            endpoint = self._server.start()
        try:
            endpoint.filesystem().create_dir(endpoint.bucket)
        except OSError as exc:
            self.teardown_session()
            raise StoreError(
                f"iceberg-s3 store: cannot use bucket {endpoint.bucket!r} at {endpoint.url}: {exc}"
            ) from exc
        self._endpoint = endpoint

    def teardown_session(self) -> None:
        endpoint, self._endpoint = self._endpoint, None
        if endpoint is not None and self._server is None:
            for store_id in sorted(self._created):
                with contextlib.suppress(OSError):
                    endpoint.filesystem().delete_dir(f"{endpoint.bucket}/{store_id}")
        self._created.clear()
        if self._server is not None:
            self._server.stop()
            self._server = None

    def provision(self, dataset: DatasetFiles) -> ProvisionedIcebergS3:
        endpoint = self.endpoint
        store_id = new_store_id()
        root = self.workdir / store_id
        self._created.add(store_id)
        item = ProvisionedIcebergS3(self, store_id, root)
        try:
            root.mkdir(parents=True)
            views = _write_tables(root, endpoint, item.prefix, dataset)
            _build_views(root / CATALOG, views, endpoint, item.prefix)
            for path in root.rglob("*"):
                if path.is_file():
                    path.chmod(0o444)
        except Exception as exc:
            item.teardown()
            if isinstance(exc, StoreError):
                raise
            raise StoreError(f"iceberg-s3 store: provisioning {store_id} failed: {exc}") from exc
        return item


def _write_tables(
    root: Path, endpoint: S3Endpoint, prefix: str, dataset: DatasetFiles
) -> dict[str, str]:
    """Each Parquet file as Iceberg table `main.<stem>` through pyiceberg; view SELECTs."""
    try:
        from pyiceberg.catalog.sql import SqlCatalog
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise StoreError("the iceberg-s3 store needs pyiceberg: run `uv add pyiceberg`") from exc
    catalog: Any = SqlCatalog(
        "backintel",
        uri=f"sqlite:///{root / ICEBERG_DB}",
        warehouse=prefix.rstrip("/"),
        **endpoint.pyiceberg_properties(),
    )
    views: dict[str, str] = {}
    try:
        catalog.create_namespace(NAMESPACE)
        for path in sorted(dataset.parquet_dir.glob("*.parquet")):
            data = pq.read_table(path)
            table = catalog.create_table((NAMESPACE, path.stem), schema=data.schema)
            if data.num_rows:
                table.append(data)
                table = catalog.load_table((NAMESPACE, path.stem))
            location = quote_literal(str(table.metadata_location))
            views[path.stem] = f"SELECT * FROM iceberg_scan({location})"
    finally:
        catalog.engine.dispose()
    return views


def _build_views(db_path: Path, views: dict[str, str], endpoint: S3Endpoint, prefix: str) -> None:
    conn = duckdb.connect(str(db_path), config=dict(BASE_CONFIG))
    try:
        load_extensions(conn, EXTENSIONS)
        create_secret(conn, endpoint, prefix)
        for name, select in sorted(views.items()):
            conn.execute(f"CREATE VIEW {quote_ident(name)} AS {select}")
        conn.execute("CHECKPOINT")
    except duckdb.Error as exc:
        raise StoreError(f"iceberg-s3 store: cannot build the view catalog: {exc}") from exc
    finally:
        conn.close()
