"""SQLite: the `sqlite` store (a copy per item) and a user's SQLite file used in place."""
