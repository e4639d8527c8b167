"""Drop the PostgreSQL databases and roles that a process now gone left behind."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from stores.owner import Owner
from stores.pg_conn import without_password

__all__ = ["SOURCE_FILE", "marker_dsn", "sweep_source", "sweep_stale", "write_marker"]

SOURCE_FILE = "postgres-source.json"
"""In a store folder serving a PostgreSQL source of your own: its DSN without the password
(`dsn`), the environment variable the run read it from (`env`) and the roles it made and has
not dropped yet (`made`), so `backintel clean` can sweep that server after a crash,
authenticating as the run did: the DSN in that variable when it is set to the same DSN, else
libpq's own (`PGPASSWORD`, `~/.pgpass` or `PGPASSFILE`, a service file). No password is kept."""


def write_marker(path: Path, doc: dict[str, Any]) -> None:
    """Write `doc` as JSON to `path` atomically (a kill leaves the old record or the new)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as fh:
        json.dump(doc, fh)
    os.replace(tmp, path)


def marker_dsn(doc: dict[str, Any]) -> str:
    """The DSN to sweep a source's server with: the variable's (with its password) when it
    still names the recorded server, else the recorded DSN (libpq finds the password)."""
    plain, env = str(doc["dsn"]), doc.get("env")
    value = os.environ.get(str(env), "").strip() if env else ""
    return value if value and without_password(value) == plain else plain


def sweep_source(doc: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Sweep the server a source record names (`sweep_stale`): (what was dropped, the roles
    the record names that are still there). Raises when the server cannot be reached."""
    import psycopg

    dsn = marker_dsn(doc)
    dropped = sweep_stale(dsn)
    made = [str(r) for r in doc.get("made") or []]
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        rows = conn.execute("SELECT rolname FROM pg_roles WHERE rolname = ANY(%s)", (made,))
        left = sorted(str(r[0]) for r in rows.fetchall())
    return dropped, left


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def sweep_stale(dsn: str) -> list[str]:
    """Drop the `bi_*` databases and roles whose owner names a process of this host that is
    gone (`stores.owner.Owner.is_gone`); the names dropped. A database's owner is in its
    comment or, when a kill came before the comment, in the comment of the role that owns it
    (`bi_<hex>_own`, created with its comment in one transaction). Others' live ones, and
    anything without a backintel mark, are left alone."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as admin:
        dbs = admin.execute(
            "SELECT d.datname, coalesce(shobj_description(d.oid, 'pg_database'), "
            "shobj_description(d.datdba, 'pg_authid')) FROM pg_database d "
            "WHERE d.datname LIKE 'bi\\_%'"
        ).fetchall()
        roles = admin.execute(
            "SELECT rolname, shobj_description(oid, 'pg_authid') FROM pg_roles "
            "WHERE rolname LIKE 'bi\\_%\\_ro' OR rolname LIKE 'bi\\_%\\_own' "
            "ORDER BY rolname LIKE '%\\_own'"
        ).fetchall()
        dropped = []
        for name, comment in dbs:
            owner = Owner.from_comment(comment)
            if owner is not None and owner.is_gone():
                admin.execute(f"DROP DATABASE IF EXISTS {_ident(str(name))} WITH (FORCE)")
                admin.execute(f"DROP ROLE IF EXISTS {_ident(str(name) + '_ro')}")
                dropped.append(str(name))
        for name, comment in roles:
            owner = Owner.from_comment(comment)
            if owner is None or not owner.is_gone() or str(name)[:-3] in dropped:
                continue
            try:  # an owner role that still owns something (not ours to judge) stays
                admin.execute(f"DROP ROLE IF EXISTS {_ident(str(name))}")
            except psycopg.errors.DependentObjectsStillExist:
                continue
            dropped.append(str(name))
    return dropped
