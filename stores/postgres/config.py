"""Where the `postgres` backend finds its server: constants light enough to import anywhere
(the session-start sweep reads them without loading the backend and its Arrow stack)."""

from __future__ import annotations

__all__ = ["DEFAULT_DSN", "INITDB"]

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
"""The server used when `BACKINTEL_PG_DSN` is not set."""
INITDB = "initdb"
"""The `BACKINTEL_PG_DSN` value that asks for a throwaway cluster."""
