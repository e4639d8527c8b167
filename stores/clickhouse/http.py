"""ClickHouse's HTTP interface, spoken directly: the server mode's only connection.

clickhouse-connect (the driver the issue names) cannot open a session on an old server: its
start-up query reads `system.settings.readonly`, a column ClickHouse 18.16 (Debian's
`clickhouse-server`) lacks (`Code: 47 ... Unknown identifier: readonly`), and it has no
setting to skip that query. `HttpClient` posts each statement to `/` with basic auth, reads
`TabSeparatedWithNamesAndTypes` and turns each value into a Python value by its declared type
(`parse`), and sends rows as `TabSeparated` (`tsv_row`). Every server version speaks this.
"""

from __future__ import annotations

import base64
import http.client
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit

__all__ = ["ClickHouseHTTPError", "HttpClient", "Rows", "parse", "tsv_row"]

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "b": "\b", "f": "\f", "0": "\0", "\\": "\\",
            "'": "'", '"': '"', "N": "\\N"}  # fmt: skip
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


class ClickHouseHTTPError(Exception):
    """The server answered with an error (its text, with `Code: N`) or could not be reached."""


@dataclass(frozen=True)
class Rows:
    names: list[str]
    types: list[str]
    rows: list[tuple[Any, ...]]


class HttpClient:
    """One user's statements to one server (`http://user:password@host:port`)."""

    def __init__(
        self,
        dsn: str,
        *,
        user: str | None = None,
        password: str | None = None,
        settings: dict[str, str] | None = None,
    ) -> None:
        parts = urlsplit(dsn)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ValueError(
                f"BACKINTEL_CLICKHOUSE_DSN {dsn!r}: expected http://user:password@host:8123 "
                "(ClickHouse's HTTP interface)"
            )
        self.dsn = parts._replace(netloc=f"{parts.hostname}:{parts.port or 8123}").geturl()
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port or 8123
        self.user = user if user is not None else unquote(parts.username or "default")
        secret = password if password is not None else unquote(parts.password or "")
        token = base64.b64encode(f"{self.user}:{secret}".encode()).decode()
        self._auth = f"Basic {token}"
        self.settings = dict(settings or {})
        """Settings sent in every request's URL (the statement, in the body, cannot change
        them: with `readonly=1` among them the server refuses SET and SETTINGS)."""

    def post(
        self, sql: str, *, database: str | None = None, body: bytes = b"", timeout_s: float = 60
    ) -> str:
        """Run `sql` (with `body` appended as its data) and return the response text."""
        params = {"query": sql} if body else {}
        if database:
            params["database"] = database
        params.update(self.settings)
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=timeout_s)
        try:
            path = "/?" + urlencode(params) if params else "/"
            conn.request(
                "POST", path, body if body else sql.encode(), {"Authorization": self._auth}
            )
            response = conn.getresponse()
            text = response.read().decode("utf-8", "replace")
        except OSError as exc:
            raise ClickHouseHTTPError(f"ClickHouse at {self.dsn} unreachable: {exc}") from exc
        finally:
            conn.close()
        if response.status != 200:
            raise ClickHouseHTTPError(text.strip())
        return text

    def query(self, sql: str, *, database: str | None = None, timeout_s: float = 60) -> Rows:
        """`sql` as typed rows (it must not carry its own FORMAT clause)."""
        text = self.post(
            f"{sql}\nFORMAT TabSeparatedWithNamesAndTypes", database=database, timeout_s=timeout_s
        )
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if len(lines) < 2:
            raise ClickHouseHTTPError(f"unexpected answer from ClickHouse: {text[:200]!r}")
        names = [_unescape(v) for v in lines[0].split("\t")]
        types = [_unescape(v) for v in lines[1].split("\t")]
        rows = [
            tuple(parse(v, t) for v, t in zip(line.split("\t"), types, strict=True))
            for line in lines[2:]
        ]
        return Rows(names, types, rows)


def _unescape(text: str) -> str:
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(1)), text)


def parse(text: str, kind: str) -> Any:
    """One TabSeparated value as Python: NULL as None, Decimal, `date`, naive UTC `datetime`."""
    if kind.startswith("Nullable("):
        return None if text == "\\N" else parse(text, kind[len("Nullable(") : -1])
    if kind.startswith("LowCardinality("):
        return parse(text, kind[len("LowCardinality(") : -1])
    if re.match(r"U?Int\d+$", kind):
        return int(text)
    if kind.startswith("Float"):
        return float(text.replace("inf", "Infinity")) if text != "nan" else float("nan")
    if kind.startswith("Decimal"):
        return Decimal(text)
    if kind == "Date" or kind == "Date32":
        return date.fromisoformat(text)
    if kind.startswith("DateTime"):
        return datetime.fromisoformat(text)
    if kind == "Bool":
        return text == "true"
    return _unescape(text)


def tsv_row(values: Sequence[Any]) -> str:
    """One row in TabSeparated, NULL as `\\N`."""
    out = []
    for value in values:
        if value is None:
            out.append("\\N")
        elif isinstance(value, bool):
            out.append("1" if value else "0")
        elif isinstance(value, datetime):
            if value.tzinfo is not None:
                value = value.astimezone(UTC).replace(tzinfo=None)
            out.append(value.isoformat(sep=" ", timespec="seconds"))
        elif isinstance(value, bytes):
            out.append(_escape(value.decode("utf-8", "surrogateescape")))
        else:
            out.append(_escape(str(value)))
    return "\t".join(out)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
