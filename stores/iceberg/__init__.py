"""Iceberg: a local Iceberg warehouse (`iceberg`) and one on S3 (`iceberg-s3`), read by DuckDB."""
