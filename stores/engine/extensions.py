"""DuckDB extensions loaded from their PyPI wheels, and guarded connections that need them.

DuckDB 1.5.5 ships its extensions as `duckdb-extension-<name>==1.5.5` wheels that put
`<name>.duckdb_extension` under the package's `extensions/v<version>/` folder. They are loaded by
absolute path with autoinstall/autoload off, so nothing is ever downloaded at run time.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path

import duckdb

from stores.base import StoreError
from stores.engine.common import BASE_CONFIG, quote_literal

__all__ = ["extension_path", "load_extensions", "open_guarded_with"]

_WHEELS = {
    "sqlite_scanner": "duckdb_extension_sqlite_scanner",
    "postgres_scanner": "duckdb_extension_postgres_scanner",
    "iceberg": "duckdb_extension_iceberg",
    "avro": "duckdb_extension_avro",
    "tpch": "duckdb_extension_tpch",
    "httpfs": "duckdb_extension_httpfs",
}


def extension_path(name: str) -> Path:
    """The installed `<name>.duckdb_extension` file; `StoreError` with the install command."""
    package = _WHEELS.get(name)
    if package is None:
        raise StoreError(f"no wheel known for DuckDB extension {name!r}; known: {sorted(_WHEELS)}")
    wheel = package.replace("_", "-")
    hint = f"run `uv add {wheel}=={duckdb.__version__}`"
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise StoreError(f"DuckDB extension {name!r} is not installed: {hint}")
    folder = Path(spec.origin).parent / "extensions" / f"v{duckdb.__version__}"
    path = folder / f"{name}.duckdb_extension"
    if not path.is_file():
        raise StoreError(
            f"the {wheel} wheel has no {path.name} for DuckDB {duckdb.__version__} "
            f"(looked in {folder}): {hint}"
        )
    return path


def load_extensions(conn: duckdb.DuckDBPyConnection, names: Sequence[str]) -> None:
    """`LOAD` each extension from its wheel, by absolute path."""
    for name in names:
        try:
            conn.execute(f"LOAD {quote_literal(str(extension_path(name)))}")
        except duckdb.Error as exc:
            raise StoreError(f"cannot load DuckDB extension {name!r}: {exc}") from exc


def open_guarded_with(
    db_path: Path,
    *,
    extensions: Sequence[str],
    allowed_dirs: Sequence[Path] = (),
    allowed_files: Sequence[Path] = (),
    prepare: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
    secret_dir: Path | None = None,
) -> duckdb.DuckDBPyConnection:
    """Like `open_guarded`, with extensions loaded and `prepare(conn)` run (e.g. ATTACH ...
    READ_ONLY) before external access is switched off and the configuration locked; only the
    folders `allowed_dirs` and the files `allowed_files` stay readable.

    `secret_dir`: an empty folder used as the persistent-secret directory (the postgres scanner
    looks secrets up on ATTACH and fails when persistent secrets are off)."""
    config: dict[str, str | bool | int | float | list[str]] = dict(BASE_CONFIG)
    if secret_dir is not None:
        config |= {"allow_persistent_secrets": "true", "secret_directory": str(secret_dir)}
    try:
        conn = duckdb.connect(str(db_path), read_only=True, config=config)
    except duckdb.Error as exc:
        raise StoreError(f"cannot open DuckDB store {db_path}: {exc}") from exc
    try:
        load_extensions(conn, extensions)
        if prepare is not None:
            prepare(conn)
        if allowed_dirs:
            dirs = ", ".join(quote_literal(str(d).rstrip("/") + "/") for d in allowed_dirs)
            conn.execute(f"SET allowed_directories = [{dirs}]")
        if allowed_files:
            files = ", ".join(quote_literal(str(f)) for f in allowed_files)
            conn.execute(f"SET allowed_paths = [{files}]")
        conn.execute("SET temp_directory = ''")
        conn.execute("SET enable_external_access = false")
        conn.execute("SET lock_configuration = true")
    except (duckdb.Error, StoreError) as exc:
        conn.close()
        if isinstance(exc, StoreError):
            raise
        raise StoreError(f"cannot prepare DuckDB store {db_path}: {exc}") from exc
    return conn
