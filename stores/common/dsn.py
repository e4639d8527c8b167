"""Connection strings (URLs or `key=value`) without their passwords: for errors, records and
run.json, whichever server they name."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

__all__ = ["dsn_password", "query_value", "redact", "without_password"]


def dsn_password(dsn: str) -> str | None:
    """The password written in a DSN (in its user part or as `password=`), if any."""
    parts = urlsplit(dsn)
    userinfo = parts.netloc.rsplit("@", 1)[0] if "@" in parts.netloc else ""
    if ":" in userinfo:
        return unquote(userinfo.split(":", 1)[1])
    return query_value(dsn, "password")


def query_value(dsn: str, key: str) -> str | None:
    values = [v for k, v in parse_qsl(urlsplit(dsn).query, keep_blank_values=True) if k == key]
    return values[-1] if values else None


def without_password(dsn: str) -> str:
    """The DSN with no password in it (libpq then finds one in `PGPASSWORD`, `.pgpass`)."""
    parts = urlsplit(dsn)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}@{host}"
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "password"]
    return urlunsplit(
        (parts.scheme, netloc, parts.path, urlencode(query, quote_via=quote), parts.fragment)
    )


def redact(text: str, *dsns: str) -> str:
    """`text` with every password of `dsns` (and any `user:password@` or `password=` in a
    DSN written in it) replaced by `***`: for errors, records and run.json."""
    for dsn in dsns:
        secret = dsn_password(dsn)
        if secret:
            text = text.replace(secret, "***")
            text = text.replace(quote(secret, safe=""), "***")
    text = _URL_PASSWORD.sub(r"\1***@", text)
    return _KV_PASSWORD.sub(r"\1***", text)


_URL_PASSWORD = re.compile(r"((?:postgres(?:ql)?|clickhouse)://[^:/@\s]*:)[^@\s]*@")


_KV_PASSWORD = re.compile(r"(password=)[^&\s]*", re.IGNORECASE)
