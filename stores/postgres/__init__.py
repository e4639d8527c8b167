"""PostgreSQL: the `postgres` store (a database per item) and a user's database used in place."""
