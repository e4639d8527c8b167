"""Every table function each DuckDB-backed session exposes is classified: allowed
(`SAFE_TABLE_FUNCTIONS`) or refused with a reason (`REFUSED_TABLE_FUNCTIONS`). A DuckDB
upgrade or a new extension that adds one fails here until it is classified, and every refused
one is refused by `run_sql` before DuckDB binds it (nothing is opened)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stores.base import QueryRefused
from stores.engine.policy import REFUSED_TABLE_FUNCTIONS, SAFE_TABLE_FUNCTIONS
from tests.test_hostile_isolation import Backend

DUCKDB_BACKED = ["duckdb", "lake-parquet", "files", "files-mixed", "iceberg",
                 "multi:postgres:olist_orders+sqlite:olist_catalog",
                 "multi:iceberg:ice_db+duckdb:duck_db"]  # fmt: skip
LIST = (
    "SELECT DISTINCT function_name FROM duckdb_functions() "
    "WHERE function_type IN ('table', 'table_macro') ORDER BY 1"
)


@pytest.fixture(scope="module", params=DUCKDB_BACKED)
def backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Backend]:
    b = Backend(request.param, tmp_path_factory.mktemp(request.param.replace(":", "_")[:20]))
    yield b
    b.close()


def test_the_two_lists_do_not_overlap() -> None:
    assert not SAFE_TABLE_FUNCTIONS & REFUSED_TABLE_FUNCTIONS.keys()


def test_every_table_function_is_classified_and_every_refused_one_is_refused(
    backend: Backend,
) -> None:
    with backend.item.connect() as session:
        names = [str(r[0]) for r in session.run_sql(LIST, 1000).rows]
        unclassified = set(names) - SAFE_TABLE_FUNCTIONS - REFUSED_TABLE_FUNCTIONS.keys()
        assert not unclassified, f"classify in stores/engine/policy.py: {sorted(unclassified)}"
        refused = [n for n in names if n not in SAFE_TABLE_FUNCTIONS]
        assert len(refused) > 40
        for name in refused:
            for sql in (f"SELECT * FROM {name}('/etc/passwd')",
                        f"SELECT * FROM main.{name}()",
                        f"SELECT 1 FROM range(1) r, LATERAL (SELECT * FROM {name}()) t",
                        f"WITH t AS (SELECT * FROM {name}()) SELECT * FROM t",
                        f"EXPLAIN SELECT * FROM {name}()"):  # fmt: skip
                with pytest.raises(QueryRefused, match=name):
                    session.run_sql(sql)
        assert session.run_sql("SELECT count(*) AS n FROM range(5)").rows == [(5,)]
        assert session.run_sql("SELECT count(*) AS n FROM duckdb_columns()").rows[0][0] >= 3


def test_scanner_attacks_name_what_they_reach(backend: Backend, tmp_path: Path) -> None:
    target = backend.other_file()
    with backend.item.connect() as session:
        for sql, why in [
            (f"SELECT * FROM sqlite_scan('{target}', 'orders')", "another database"),
            ("SELECT * FROM postgres_scan('host=127.0.0.1 user=postgres dbname=postgres', "
             "'pg_catalog', 'pg_authid')", "network connection"),
            (f"SELECT * FROM '{target}'", "names a file"),
            ("SELECT json_execute_serialized_sql(json_serialize_sql('SELECT 1'))", "runs SQL"),
            ("SELECT current_setting('secret_directory')", "reveals host paths"),
            ("PIVOT orders ON status USING count(*)", "single|refused"),
        ]:  # fmt: skip
            with pytest.raises(QueryRefused, match=why):
                session.run_sql(sql)


def test_the_multi_engine_guard_alone_keeps_other_sqlite_files_out(tmp_path: Path) -> None:
    """Below the statement check: the SQLite component is readable as its one file, not its
    folder, so DuckDB's own readers cannot open another item's copy beside it. (The SQLite
    scanner opens files through SQLite, past this guard: only the statement check stops
    `sqlite_scan`, which is why it is refused there.)"""
    import duckdb

    b = Backend("multi:postgres:olist_orders+sqlite:olist_catalog", tmp_path)
    try:
        conn = b.item.engine_connection()  # type: ignore[attr-defined]
        try:
            assert conn.execute("SELECT count(*) FROM olist_catalog.orders").fetchone() == (3000,)
            with pytest.raises(duckdb.PermissionException, match="Cannot access file"):
                conn.execute(f"SELECT * FROM read_blob('{b.other_file()}')")
        finally:
            conn.close()
    finally:
        b.close()
