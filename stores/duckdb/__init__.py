"""DuckDB: the `duckdb` store (a database file per item) and a user's DuckDB file, Parquet or CSV
folder used in place."""
