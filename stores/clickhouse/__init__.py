"""ClickHouse: the embedded chDB store, the `clickhouse-server` store and a user's server used in
place."""
