"""A ClickHouse source's DSN (`clickhouse://user:password@host:port/db`) and what a killed run
left on its server.

The DSN names ClickHouse's HTTP interface (port 8123 by default; `?secure=1` for HTTPS). The
password is the URL's, else the environment variable `CLICKHOUSE_PASSWORD` (the one
`clickhouse-client` reads), else empty. No error, record or file carries it
(`stores.common.dsn.redact` knows `clickhouse://`).

ClickHouse 18.16 keeps no comment on a database, so a per-item database cannot carry its owner
the way a PostgreSQL role does. Instead the store folder (which records its owning process,
`stores.owner`) keeps `SOURCE_FILE`: the DSN without its password and the `bi_` databases the
process has made and not yet dropped, written before each `CREATE DATABASE`. `backintel clean`
drops the databases listed in the file of a folder whose owner is gone (`sweep_file`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from stores.base import StoreError
from stores.clickhouse.http import HttpClient
from stores.clickhouse.names import quote
from stores.common.dsn import redact, without_password

__all__ = [
    "PASSWORD_ENV",
    "SOURCE_FILE",
    "ClickHouseDsn",
    "record",
    "sweep_file",
    "sweep_folder",
    "sweep_server",
]

PASSWORD_ENV = "CLICKHOUSE_PASSWORD"
SOURCE_FILE = "clickhouse-source.json"
"""In a store folder serving a ClickHouse source: `{"dsn": <no password>, "databases": [...]}`."""


@dataclass(frozen=True)
class ClickHouseDsn:
    """A parsed `clickhouse://` DSN."""

    raw: str
    url: str
    """`http(s)://host:port`, what `HttpClient` takes (no credentials)."""
    user: str
    password: str
    database: str

    @classmethod
    def parse(cls, dsn: str) -> ClickHouseDsn:
        parts = urlsplit(dsn)
        shown = redact(dsn, dsn)
        if parts.scheme != "clickhouse" or not parts.hostname:
            raise StoreError(
                f"clickhouse: {shown!r} is not a clickhouse://user:password@host:port/db DSN "
                "(ClickHouse's HTTP interface, port 8123 by default)"
            )
        database = parts.path.strip("/")
        if not database or "/" in database:
            raise StoreError(f"clickhouse source {shown!r} names no database (…/<db>)")
        query = dict(parse_qsl(parts.query))
        unknown = sorted(set(query) - {"secure"})
        if unknown:
            raise StoreError(
                f"clickhouse source {shown!r}: unknown parameter {unknown[0]!r}; allowed: secure"
            )
        scheme = "https" if query.get("secure", "").lower() in ("1", "true", "yes") else "http"
        try:
            port = parts.port or 8123
        except ValueError:
            raise StoreError(f"clickhouse source {shown!r}: the port is not a number") from None
        password = unquote(parts.password) if parts.password is not None else None
        if password is None:
            password = os.environ.get(PASSWORD_ENV, "")
        user = unquote(parts.username or "default")
        return cls(dsn, f"{scheme}://{parts.hostname}:{port}", user, password, database)

    @property
    def shown(self) -> str:
        """The DSN as errors and records may show it (password `***`)."""
        return redact(self.raw, self.raw)

    def redact(self, text: str) -> str:
        """`text` without the password, wherever it appears."""
        text = redact(text, self.raw)
        return text.replace(self.password, "***") if len(self.password) >= 4 else text

    def client(self, settings: dict[str, str] | None = None) -> HttpClient:
        return HttpClient(self.url, user=self.user, password=self.password, settings=settings)


def record(workdir: Path, dsn: ClickHouseDsn, databases: set[str]) -> None:
    """Write `SOURCE_FILE` in `workdir` (atomically: a kill never leaves half a file)."""
    path = workdir / SOURCE_FILE
    tmp = path.with_suffix(".tmp")
    body = {"dsn": without_password(dsn.raw), "databases": sorted(databases)}
    tmp.write_text(json.dumps(body))
    os.replace(tmp, path)


def sweep_file(marker: Path) -> list[str]:
    """Drop the `bi_` databases a gone process listed in `marker`; the names dropped."""
    data = json.loads(marker.read_text())
    names = [str(n) for n in data.get("databases", []) if str(n).startswith("bi_")]
    if not names:
        return []
    dsn = ClickHouseDsn.parse(str(data["dsn"]))
    admin = dsn.client()
    for name in names:
        admin.post(f"DROP DATABASE IF EXISTS {quote(name)}")
    return [f"clickhouse {name}" for name in names]


def sweep_folder(folder: Path, dry_run: bool) -> list[str] | None:
    """The `SOURCE_FILE` a gone process left in `folder`: its databases dropped (`sweep_file`)."""
    marker = folder / SOURCE_FILE
    if not marker.is_file():
        return None
    return [] if dry_run else sweep_file(marker)


def sweep_server(dry_run: bool) -> list[str]:
    """Nothing: the embedded and per-run ClickHouse stores leave nothing on a shared server."""
    return []
