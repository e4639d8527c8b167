"""`tpch`: TPC-H at a chosen scale factor, generated offline with DuckDB's `tpch` extension, and
its oracles."""
