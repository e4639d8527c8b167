"""PostgreSQL connection helpers shared by the backend, its clone source and its plan reader:
quoted identifiers, DSNs for another database, the ADBC driver (imported only when used) and
ADBC errors as store errors."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from stores.base import QueryError, QueryRefused, QueryTimeout

__all__ = ["REFUSED_STATES", "adbc_module", "ident", "query_error", "with_db"]

REFUSED_STATES = {"42501", "25006", "0A000"}


def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def adbc_module() -> Any:
    """The ADBC PostgreSQL DB-API module (imported only when this backend is used)."""
    import adbc_driver_postgresql.dbapi  # type: ignore[import-untyped]

    return adbc_driver_postgresql.dbapi


def with_db(dsn: str, db: str, user: str | None = None) -> str:
    parts = urlsplit(dsn)
    host = parts.netloc.rsplit("@", 1)[-1]
    netloc = parts.netloc if user is None else f"{user}@{host}"
    return urlunsplit((parts.scheme, netloc, f"/{db}", parts.query, parts.fragment))


def query_error(exc: Exception, where: str, timeout_s: float) -> QueryError:
    state = str(getattr(exc, "sqlstate", "") or "")
    text = f"{str(exc).strip()} (on {where})"
    if state == "57014":
        return QueryTimeout(
            f"statement ran past the {timeout_s:g}s limit on {where} and was cancelled"
        )
    if state in REFUSED_STATES or (state == "42601" and "multiple commands" in str(exc)):
        return QueryRefused(f"refused, this store is read-only for the analyst: {text}")
    return QueryError(text)
