"""Open the item's store from code running inside the sandbox (shipped there; stdlib imports).

    import backintel_store as bs
    rows = bs.query("SELECT count(*) AS n FROM orders")   # [{'n': 99441}]: every store
    con = bs.connect()            # sqlite3, read-only (SQLite stores)
    db = bs.duckdb()              # duckdb with the store attached read-only as `store`
    df = bs.table("orders")       # one table as a polars DataFrame
    bs.tables()                   # table names

A store on disk is mounted read-only at $BACKINTEL_STORE (`/data/store/<name>` in bwrap and
docker): a SQLite file, a DuckDB file, or a folder of `<table>.parquet` files are understood.
Every store, and the only way to a server store (PostgreSQL, ClickHouse, Iceberg on S3), is
the read-only query channel at $BACKINTEL_QUERY: a Unix socket the harness serves, which runs
each statement through the item's own read-only session (the same refusals, statement timeout
and caps as the analyst's `run_sql`) and sends the rows back.

The channel's wire protocol (the harness's server, `pytest_backintel.evidence.query_channel`,
speaks it too): each message is a 4-byte big-endian length and that many bytes of UTF-8 JSON.
A request is `{"sql": "..."}` or `{"op": "tables"}`; a reply `{"ok": true, "columns": [...],
"rows": [[...]]}`, `{"ok": true, "tables": [...]}` or `{"ok": false, "kind": ..., "error":
...}`. A value JSON cannot carry exactly is a one-key object (`encode_cell`): `{"$decimal":
"1.10"}`, `{"$date": ...}`, `{"$datetime": ...}`, `{"$time": ...}`, `{"$bytes": base64}`,
`{"$float": "nan"}`, `{"$timedelta": [days, seconds, microseconds]}`, `{"$map": [[k, v]]}`,
`{"$uuid": ...}`, `{"$text": str(value)}` (anything else).
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import math
import os
import socket
import sqlite3
import struct
import uuid
import warnings
from decimal import Decimal
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_REQUEST_BYTES",
    "QUERY_ENV",
    "QueryError",
    "connect",
    "decode_cell",
    "duckdb",
    "encode_cell",
    "kind",
    "query",
    "query_rows",
    "recv_frame",
    "send_frame",
    "store_path",
    "table",
    "tables",
]

QUERY_ENV = "BACKINTEL_QUERY"
"""The environment variable naming the query channel's socket (unset: no channel)."""
QUERY_FD_ENV = "BACKINTEL_QUERY_FD"
"""Set when the run was given its channel as a connected socket (this descriptor) instead."""
MAX_REQUEST_BYTES = 1 << 20
"""The largest request the harness reads; a longer one is refused unread."""
_MAX_REPLY_BYTES = 1 << 30
_HEADER = struct.Struct(">I")


class QueryError(RuntimeError):
    """The statement was refused or failed; the message is the store's (or the channel's).

    `kind` names what happened: `QueryRefused` (a write, DDL, a setting), `QueryTimeout`,
    `QueryError`, `ResultTooLarge`, `BadRequest`, `ChannelError`."""

    def __init__(self, message: str, kind: str = "QueryError") -> None:
        super().__init__(message)
        self.kind = kind


def encode_cell(value: Any) -> Any:
    """`value` as JSON, tagged when JSON cannot carry it exactly (see the module docstring)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, _dt.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, _dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, _dt.time):
        return {"$time": value.isoformat()}
    if isinstance(value, _dt.timedelta):
        return {"$timedelta": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, uuid.UUID):
        return {"$uuid": str(value)}
    if isinstance(value, list | tuple):
        return [encode_cell(v) for v in value]
    if isinstance(value, dict):
        return {"$map": [[encode_cell(k), encode_cell(v)] for k, v in value.items()]}
    return {"$text": str(value)}


_DECODERS: dict[str, Any] = {
    "$decimal": Decimal,
    "$datetime": _dt.datetime.fromisoformat,
    "$date": _dt.date.fromisoformat,
    "$time": _dt.time.fromisoformat,
    "$timedelta": lambda v: _dt.timedelta(days=v[0], seconds=v[1], microseconds=v[2]),
    "$bytes": base64.b64decode,
    "$float": float,
    "$uuid": uuid.UUID,
    "$text": str,
}


def decode_cell(value: Any) -> Any:
    """The Python value `encode_cell` tagged."""
    if isinstance(value, list):
        return [decode_cell(v) for v in value]
    if not isinstance(value, dict):
        return value
    ((tag, inner),) = value.items()
    if tag == "$map":
        return {_hashable(decode_cell(k)): decode_cell(v) for k, v in inner}
    return _DECODERS[tag](inner)


def _hashable(value: Any) -> Any:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def send_frame(sock: socket.socket, message: Any) -> None:
    """Send one message: its length, then its JSON."""
    data = json.dumps(message, separators=(",", ":"), allow_nan=False).encode("utf-8")
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise QueryError("the query channel closed the connection", "ChannelError")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket, max_bytes: int = _MAX_REPLY_BYTES) -> Any:
    """Read one message (at most `max_bytes` of JSON)."""
    (size,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if size > max_bytes:
        raise QueryError(f"a message of {size} bytes is over {max_bytes}", "ChannelError")
    return json.loads(_recv_exact(sock, size))


def _channel() -> str | None:
    return os.environ.get(QUERY_ENV) or None


_held: list[socket.socket] = []


def _exchange(path: str, message: dict[str, Any]) -> Any:
    """Send one request and read its reply: over the connected socket the run was given
    ($BACKINTEL_QUERY_FD, a run forked by the harness's zygote), else a new connection."""
    fd = os.environ.get(QUERY_FD_ENV, "")
    if fd.isdigit():
        if not _held:
            _held.append(socket.socket(fileno=int(fd)))
        send_frame(_held[0], message)
        return recv_frame(_held[0])
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        send_frame(sock, message)
        return recv_frame(sock)


def _request(message: dict[str, Any]) -> dict[str, Any]:
    path = _channel()
    if path is None:
        raise RuntimeError(f"this sandbox has no query channel (${QUERY_ENV} is not set)")
    try:
        reply = _exchange(path, message)
    except OSError as exc:
        raise QueryError(f"the query channel failed: {exc}", "ChannelError") from exc
    if not reply.get("ok"):
        raise QueryError(str(reply.get("error")), str(reply.get("kind", "QueryError")))
    return reply  # type: ignore[no-any-return]


def query_rows(sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run one read-only statement over the query channel: (column names, rows).

    The whole result or an error: a result past the channel's row or byte cap raises
    `QueryError` (kind `ResultTooLarge`), never a silent part of it."""
    if len(sql.encode("utf-8")) > MAX_REQUEST_BYTES - 64:
        raise QueryError(f"the statement is over {MAX_REQUEST_BYTES} bytes", "BadRequest")
    reply = _request({"sql": sql})
    if reply.get("cut_cells"):
        warnings.warn(
            f"{reply['cut_cells']} text or binary value(s) were cut to the store's cell cap",
            stacklevel=2,
        )
    rows = [tuple(decode_cell(v) for v in row) for row in reply["rows"]]
    return list(reply["columns"]), rows


def query(sql: str) -> list[dict[str, Any]]:
    """Run one read-only statement over the query channel: its rows as dicts by column name.

    Works on every store (the only way to a PostgreSQL or ClickHouse store). Writes, DDL and
    settings are refused as in `run_sql`: a refusal, a failure or a result past the cap raises
    `QueryError` with the store's message."""
    columns, rows = query_rows(sql)
    return [dict(zip(columns, row, strict=True)) for row in rows]


_SQLITE_MAGIC = b"SQLite format 3\x00"
_DUCKDB_MAGIC = b"DUCK"


def store_path() -> Path:
    """The mounted store; an error when this sandbox has none."""
    value = os.environ.get("BACKINTEL_STORE")
    if not value:
        hint = " (its store is served over the query channel: use query(sql))" if _channel() else ""
        raise RuntimeError(
            f"no store is mounted in this sandbox ($BACKINTEL_STORE is not set){hint}"
        )
    return Path(value)


def _served() -> bool:
    """True when no file is mounted and the store is reached only over the query channel."""
    return not os.environ.get("BACKINTEL_STORE") and _channel() is not None


def _data_files(folder: Path) -> dict[str, Path]:
    """Tables of a folder store by name: `<table>.parquet`, `.csv` or `.json` (NDJSON)."""
    files = {}
    for file in sorted(folder.iterdir()):
        if file.suffix in {".parquet", ".csv", ".json"} and not file.stem.startswith("_"):
            files[file.stem] = file
    return files


def kind() -> str:
    """'sqlite', 'duckdb', 'parquet' (a folder of <table>.parquet files), 'files' (a folder
    of CSV and newline-delimited JSON files) or 'query' (no file: a server store, reached over
    the query channel with `query`, `tables` and `table`)."""
    if _served():
        return "query"
    path = store_path()
    if path.is_dir():
        suffixes = {f.suffix for f in _data_files(path).values()}
        return "parquet" if suffixes <= {".parquet"} else "files"
    with path.open("rb") as fh:
        head = fh.read(16)
    if head == _SQLITE_MAGIC:
        return "sqlite"
    if head[8:12] == _DUCKDB_MAGIC:
        return "duckdb"
    raise RuntimeError(f"{path} is neither a SQLite nor a DuckDB file nor a parquet folder")


def connect() -> sqlite3.Connection:
    """A read-only sqlite3 connection (mode=ro) to a SQLite store."""
    if (what := kind()) != "sqlite":
        other = "query(sql)" if what == "query" else "duckdb()"
        raise RuntimeError(f"connect() is for SQLite stores; this one is {what}: use {other}")
    return sqlite3.connect(f"file:{store_path()}?mode=ro", uri=True)


def _sqlite_extension() -> str:
    import importlib.util

    spec = importlib.util.find_spec("duckdb_extension_sqlite_scanner")
    if spec is None or spec.origin is None:
        raise RuntimeError("the duckdb-extension-sqlite-scanner wheel is not installed")
    found = sorted(Path(spec.origin).parent.glob("extensions/*/sqlite_scanner.duckdb_extension"))
    if not found:
        raise RuntimeError("the duckdb sqlite_scanner extension wheel has no extension file")
    return str(found[-1])


def duckdb() -> Any:
    """An in-memory DuckDB connection with the store attached read-only as `store` (and USEd).

    Extensions load only from installed wheels; nothing is downloaded.
    """
    if _served():
        raise RuntimeError("duckdb() needs a mounted store; this one is a server: use query(sql)")
    import duckdb as _duckdb

    threads = os.environ.get("BACKINTEL_THREADS", "2")
    con = _duckdb.connect(
        config={
            "threads": threads,
            "autoinstall_known_extensions": "false",
            "autoload_known_extensions": "false",
            # The signature check hashes the 34 MB sqlite extension on one thread per MiB, which
            # alone would exceed the sandbox's process limit; the file comes from the read-only,
            # lock-hashed wheel, so it is loaded without that check.
            "allow_unsigned_extensions": "true",
            "home_directory": os.environ.get("TMPDIR", "/tmp"),
        }
    )
    path, what = store_path(), kind()
    quoted = str(path).replace("'", "''")
    if what == "sqlite":
        con.load_extension(_sqlite_extension())
        con.execute(f"ATTACH '{quoted}' AS store (TYPE sqlite, READ_ONLY)")
        con.execute("USE store")
    elif what == "duckdb":
        con.execute(f"ATTACH '{quoted}' AS store (READ_ONLY)")
        con.execute("USE store")
    else:
        readers = {".parquet": "read_parquet", ".csv": "read_csv", ".json": "read_json"}
        scope_file = path / "_out_of_scope.txt"  # tables the scenario forbids: no view opens them
        skipped = set(scope_file.read_text().split()) if scope_file.is_file() else set()
        for name, file in _data_files(path).items():
            if name in skipped:
                continue
            src = str(file).replace("'", "''")
            view = name.replace('"', '""')
            reader = readers[file.suffix]
            con.execute(f"CREATE VIEW \"{view}\" AS SELECT * FROM {reader}('{src}')")
    return con


def tables() -> list[str]:
    """The store's table names, sorted."""
    if _served():
        return sorted(_request({"op": "tables"})["tables"])
    if kind() == "sqlite":
        with connect() as con:
            rows = con.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table','view') "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            ).fetchall()
        return [r[0] for r in rows]
    if kind() in {"parquet", "files"}:
        return sorted(_data_files(store_path()))
    return sorted(r[0] for r in duckdb().execute("SHOW TABLES").fetchall())


def table(name: str) -> Any:
    """One whole table as a polars DataFrame (over the query channel, a list of row dicts
    when polars cannot be imported; a table past the channel's cap raises `QueryError`)."""
    if _served():  # the store resolves the name (a search path may hold it unqualified)
        listed = name in tables()
        parts = name.split(".") if listed and "." in name else [name]  # `alias.table`
        quoted = ".".join('"' + part.replace('"', '""') + '"' for part in parts)
        columns, rows = query_rows(f"SELECT * FROM {quoted}")
        try:
            import polars as pl
        except ImportError:
            return [dict(zip(columns, row, strict=True)) for row in rows]
        return pl.DataFrame(rows, schema=columns, orient="row", infer_schema_length=None)
    import polars as pl

    if name not in (names := tables()):
        raise KeyError(f"no table {name!r} in the store; tables: {', '.join(names)}")
    if kind() in {"parquet", "files"}:
        file = _data_files(store_path())[name]
        if file.suffix == ".parquet":
            return pl.read_parquet(file)
        if file.suffix == ".json":
            return pl.read_ndjson(file, infer_schema_length=None)
        return pl.read_csv(file, null_values=["\\N"], infer_schema_length=None)
    if kind() == "sqlite":
        with connect() as con:
            cur = con.execute(f'SELECT * FROM "{name.replace(chr(34), chr(34) * 2)}"')
            columns = [d[0] for d in cur.description]
            return pl.DataFrame(
                cur.fetchall(), schema=columns, orient="row", infer_schema_length=None
            )
    return duckdb().execute(f'SELECT * FROM "{name.replace(chr(34), chr(34) * 2)}"').pl()
