"""PostgreSQL connection helpers shared by the backend, its clone source and its plan reader:
quoted identifiers, DSNs for another database, the ADBC driver (imported only when used) and
ADBC errors as store errors."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from stores.base import QueryError, QueryRefused, QueryTimeout
from stores.common.dsn import dsn_password, query_value, redact, without_password

__all__ = [
    "REFUSED_STATES",
    "adbc_module",
    "dsn_password",
    "dsn_user",
    "ident",
    "query_error",
    "redact",
    "with_db",
    "with_login",
    "without_password",
]

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


def dsn_user(dsn: str) -> str | None:
    """The user a `postgresql://` DSN names (None: libpq's default, the OS user)."""
    parts = urlsplit(dsn)
    if "@" not in parts.netloc:
        return query_value(dsn, "user")
    return unquote(parts.netloc.rsplit("@", 1)[0].split(":", 1)[0]) or None


def with_login(
    dsn: str, user: str, password: str | None = None, options: dict[str, str] | None = None
) -> str:
    """The DSN logging in as `user` (with `password` when given; the DSN's own password only
    when its user is `user`), every other parameter (host, port, database, `sslmode`,
    `sslrootcert`, ...) kept, and libpq `options` (`-c name=value`) added."""
    parts = urlsplit(dsn)
    host = parts.netloc.rsplit("@", 1)[-1]
    if password is None and dsn_user(dsn) == user:
        password = dsn_password(dsn)
    query = [
        (k, v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
        if k not in ("user", "password", "options")
    ]
    if password is not None and "@" not in parts.netloc:
        query.append(("password", password))
    settings = " ".join(f"-c {k}={v}" for k, v in (options or {}).items())
    if settings:
        query.append(("options", settings))
    auth = quote(user, safe="")
    if password is not None and "@" in parts.netloc:
        auth += ":" + quote(password, safe="")
    netloc = f"{auth}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, urlencode(query, quote_via=quote), ""))
