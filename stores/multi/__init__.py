"""Multi: several stores attached to one DuckDB session under aliases."""
