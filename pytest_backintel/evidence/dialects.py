"""Check queries are written once, in SQLite's dialect, and translated for other backends.

The translation (`pytest_backintel.evidence.sql_translate`, with sqlglot) is imported only when a
query needs one: a run on SQLite does without sqlglot's 0.12 s import.
"""

from __future__ import annotations

__all__ = ["SOURCE_DIALECT", "translate"]

SOURCE_DIALECT = "sqlite"


def translate(sql: str, dialect: str) -> str:
    """`sql` (SQLite dialect) as the same query in `dialect` (`sqlite`, `duckdb`, `postgres`,
    `clickhouse`)."""
    if dialect == SOURCE_DIALECT:
        return sql
    from pytest_backintel.evidence.sql_translate import translate_from_sqlite

    return translate_from_sqlite(sql, dialect)
