"""What several backends share to run queries: the engine fork server and its processes, and
the in-process DuckDB engine (sessions, policy, extensions, plans, view catalogs) that the
duckdb, files, iceberg and multi stores, and SQLite's summaries, are built on."""
