"""Which DuckDB functions an analyst's SELECT may call, decided on DuckDB's own parse tree.

Table functions are allowed by name (`SAFE_TABLE_FUNCTIONS`); every other one is refused, and
`REFUSED_TABLE_FUNCTIONS` says why for each one DuckDB 1.5.5 exposes with the scanner, iceberg
and avro extensions loaded. `tests/test_hostile_duckdb_functions.py` lists every table function
of every DuckDB-backed session and fails when one is in neither set, so a new DuckDB version
cannot add a reader silently. The file/network guard of the engine (`enable_external_access`)
does not cover the scanners: `sqlite_scan` reads any SQLite file in an allowed folder and
`postgres_scan` connects with a DSN the query writes, so this check runs before binding, when
nothing has been opened yet. Scalar functions that run SQL text or reveal settings are refused
too, and so is a table named by a path (`FROM 'x.csv'`, a replacement scan).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import duckdb

from stores.base import QueryError, QueryRefused, QueryTimeout

__all__ = [
    "REFUSED_SCALAR_FUNCTIONS",
    "REFUSED_TABLE_FUNCTIONS",
    "SAFE_TABLE_FUNCTIONS",
    "check_functions",
    "classify_error",
    "quote_literal",
    "serialized_sql",
]

SAFE_TABLE_FUNCTIONS = frozenset(
    {"range", "generate_series", "unnest", "repeat", "repeat_row", "json_each", "json_tree",
     "duckdb_columns", "duckdb_constraints", "duckdb_tables", "duckdb_views", "duckdb_schemas",
     "duckdb_types", "duckdb_functions", "duckdb_keywords", "duckdb_indexes",
     "duckdb_sequences", "duckdb_dependencies", "duckdb_optimizers", "duckdb_coordinate_systems",
     "pragma_table_info", "pragma_show", "pragma_version", "pragma_platform",
     "pragma_collations", "summary", "histogram", "histogram_values", "pg_timezone_names",
     "icu_calendar_names", "test_all_types", "test_vector_types"}
)  # fmt: skip
"""Table functions that compute from their arguments or describe the item's own catalog."""

_FILE = "opens a file"
_DB = "opens another database or a network connection"
_SQL = "runs SQL text, past this check"
_STATE = "changes engine state"
_HOST = "reveals host paths, settings, secrets or other sessions"
_PYTHON = "reads Python objects of the harness process"
REFUSED_TABLE_FUNCTIONS: dict[str, str] = {
    **dict.fromkeys(
        ["read_csv", "read_csv_auto", "read_json", "read_json_auto", "read_json_objects",
         "read_json_objects_auto", "read_ndjson", "read_ndjson_auto", "read_ndjson_objects",
         "read_parquet", "parquet_scan", "parquet_metadata", "parquet_file_metadata",
         "parquet_full_metadata", "parquet_kv_metadata", "parquet_schema", "parquet_bloom_probe",
         "read_blob", "read_text", "read_duckdb", "glob", "sniff_csv", "read_avro",
         "read_postgres_binary", "iceberg_scan", "iceberg_metadata", "iceberg_snapshots",
         "iceberg_column_stats", "iceberg_partition_stats", "iceberg_schema_properties",
         "iceberg_table_properties", "iceberg_load_table_response", "seq_scan"],
        _FILE,
    ),
    **dict.fromkeys(
        ["sqlite_scan", "sqlite_query", "sqlite_attach", "postgres_scan", "postgres_scan_pushdown",
         "postgres_query", "postgres_execute", "postgres_attach", "postgres_configure_pool",
         "pg_clear_cache", "iceberg_to_ducklake"],
        _DB,
    ),
    **dict.fromkeys(["query", "query_table", "json_execute_serialized_sql"], _SQL),
    **dict.fromkeys(
        ["checkpoint", "force_checkpoint", "enable_logging", "disable_logging",
         "enable_profiling", "disable_profiling", "truncate_duckdb_logs",
         "set_iceberg_schema_properties", "set_iceberg_table_properties",
         "remove_iceberg_schema_properties", "remove_iceberg_table_properties"],
        _STATE,
    ),
    **dict.fromkeys(
        ["duckdb_databases", "duckdb_extensions", "duckdb_settings", "duckdb_secrets",
         "which_secret", "duckdb_secret_types", "duckdb_temporary_files",
         "duckdb_external_file_cache", "duckdb_logs", "duckdb_logs_parsed",
         "duckdb_log_contexts", "duckdb_memory", "duckdb_connection_count",
         "duckdb_approx_database_count", "duckdb_prepared_statements", "duckdb_variables",
         "duckdb_profiling_settings", "duckdb_table_sample", "pragma_database_size",
         "pragma_metadata_info", "pragma_storage_info", "pragma_user_agent"],
        _HOST,
    ),
    **dict.fromkeys(["arrow_scan", "arrow_scan_dumb", "pandas_scan", "python_map_function"],
                    _PYTHON),
}  # fmt: skip
"""Every other table function of DuckDB 1.5.5 (with the shipped extensions), and why."""

REFUSED_SCALAR_FUNCTIONS: dict[str, str] = {
    "json_execute_serialized_sql": _SQL,
    "current_setting": _HOST,
    "getenv": _HOST,
    "enable_profile": _STATE,
    "disable_profile": _STATE,
    "extension_versions": _HOST,
}
"""Scalar functions refused wherever they appear in a query."""

_PATH_CHARS = frozenset("/\\:.")


def _nodes(tree: Any) -> Iterator[dict[str, Any]]:
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _table_function_refusal(name: str) -> str:
    why = REFUSED_TABLE_FUNCTIONS.get(name, "is not on the list of allowed table functions")
    if name in REFUSED_TABLE_FUNCTIONS:
        why = f"is refused: it {why}"
    return (
        f"the table function {name}() {why}; this session reads only the item's own tables "
        "(allowed: range, generate_series, unnest, json_each and catalog functions such as "
        "duckdb_tables)"
    )


def quote_literal(text: str) -> str:
    """`text` as a DuckDB string literal. Statements take values this way, not as bound
    parameters: binding one makes DuckDB's Python module import pandas, about 0.6 s in every
    engine child (`stores/engine/process.py`)."""
    return "'" + text.replace("'", "''") + "'"


def serialized_sql(conn: duckdb.DuckDBPyConnection, sql: str) -> str | None:
    """DuckDB's JSON parse tree of `sql` (`json_serialize_sql`), None if it gives no row."""
    row = conn.execute(f"SELECT json_serialize_sql({quote_literal(sql)}::VARCHAR)").fetchone()
    return str(row[0]) if row else None


def check_functions(conn: duckdb.DuckDBPyConnection, select_sql: str) -> None:
    """Refuse `select_sql` (one SELECT) when its parse tree calls a table function outside
    `SAFE_TABLE_FUNCTIONS`, a refused scalar function, or names a table by a file path.
    A SELECT DuckDB cannot serialise (PIVOT, ...) is refused: it cannot be checked."""
    try:
        text = serialized_sql(conn, select_sql)
        tree = json.loads(text) if text is not None else {"error": True}
    except (duckdb.Error, ValueError) as exc:
        raise QueryError(f"could not parse the SQL: {exc}") from exc
    if tree.get("error"):
        raise QueryRefused(
            "this statement form cannot be checked and is refused "
            f"({tree.get('error_message', 'not serialisable')}); write it as a plain "
            "SELECT (PIVOT as GROUP BY with FILTER, for instance)"
        )
    for node in _nodes(tree):
        kind = node.get("type")
        if kind == "TABLE_FUNCTION":
            name = str(node.get("function", {}).get("function_name", "")).lower()
            if name not in SAFE_TABLE_FUNCTIONS:
                raise QueryRefused(_table_function_refusal(name))
        elif node.get("class") == "FUNCTION":
            name = str(node.get("function_name", "")).lower()
            if name in REFUSED_SCALAR_FUNCTIONS or name in REFUSED_TABLE_FUNCTIONS:
                why = REFUSED_SCALAR_FUNCTIONS.get(name) or REFUSED_TABLE_FUNCTIONS[name]
                raise QueryRefused(f"the function {name}() is refused: it {why}")
        elif kind in ("BASE_TABLE", "SHOW_REF") and _PATH_CHARS & set(
            str(node.get("table_name", ""))
        ):
            raise QueryRefused(
                f"{node.get('table_name')!r} names a file, not a table; only the item's own "
                "tables can be read"
            )


def classify_error(exc: duckdb.Error, where: str) -> QueryError:
    """A DuckDB error as the store error it is: a timeout, a refusal or a query error."""
    text = f"{exc} (on {where})"
    if isinstance(exc, duckdb.InterruptException):
        return QueryTimeout(text)
    if isinstance(exc, duckdb.PermissionException) or (
        isinstance(exc, duckdb.InvalidInputException)
        and ("read-only" in str(exc) or "configuration has been locked" in str(exc))
    ):
        return QueryRefused(text)
    return QueryError(text)
