"""Drop the PostgreSQL databases and roles that a process now gone left behind."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from stores.base import StoreError, SweepIncomplete
from stores.common.dsn import redact, without_password
from stores.owner import Owner

__all__ = [
    "SOURCE_FILE",
    "marker_dsn",
    "sweep_folder",
    "sweep_server",
    "sweep_source",
    "sweep_stale",
    "write_marker",
]

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


SWEEP_LOCK = 0x6269_7377_6565_70
"""The advisory lock every sweep of a server holds: two sessions starting side by side (or a
session's two sweeps) take turns instead of dropping the same objects at once, which made one
of them fail with "tuple concurrently deleted" and stop half-way."""


def sweep_stale(dsn: str, left: list[str] | None = None) -> list[str]:
    """Drop the `bi_*` databases and roles whose owner names a process of this host that is
    gone (`stores.owner.Owner.is_gone`); the names dropped. A database's owner is in its
    comment or, when a kill came before the comment, in the comment of the role that owns it
    (`bi_<hex>_own`, created with its comment in one transaction). Others' live ones, and
    anything without a backintel mark, are left alone. One object that cannot be dropped does
    not stop the others; its name goes to `left`."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as admin:
        admin.execute("SET lock_timeout = '60s'")
        admin.execute("SELECT pg_advisory_lock(%s)", (SWEEP_LOCK,))
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
        dropped: list[str] = []
        for name, comment in dbs:
            owner = Owner.from_comment(comment)
            if owner is not None and owner.is_gone():
                statements = [
                    f"DROP DATABASE IF EXISTS {_ident(str(name))} WITH (FORCE)",
                    f"DROP ROLE IF EXISTS {_ident(str(name) + '_ro')}",
                ]
                if _drop(admin, statements, str(name), left):
                    dropped.append(str(name))
        for name, comment in roles:
            owner = Owner.from_comment(comment)
            if owner is None or not owner.is_gone() or str(name)[:-3] in dropped:
                continue
            mine = str(name).endswith("_ro")  # an owner role that still owns something
            if _drop(admin, [f"DROP ROLE IF EXISTS {_ident(str(name))}"], str(name),
                     left if mine else None):  # fmt: skip
                dropped.append(str(name))
        admin.execute("SELECT pg_advisory_unlock(%s)", (SWEEP_LOCK,))
    return dropped


def _drop(admin: Any, statements: list[str], name: str, left: list[str] | None) -> bool:
    """Run `statements` (twice at most: a concurrent catalog change is retried); False, with
    `name` in `left`, when they still fail."""
    import psycopg

    for attempt in (1, 2):
        try:
            for statement in statements:
                admin.execute(statement)
            return True
        except psycopg.errors.DependentObjectsStillExist:
            break  # not ours to judge (an owner role that still owns something)
        except psycopg.Error:
            if attempt == 2:
                break
    if left is not None:
        left.append(name)
    return False


def sweep_folder(folder: Path, dry_run: bool) -> list[str] | None:
    """The `SOURCE_FILE` a gone process left in `folder` (None: there is none): that server
    swept, authenticating as the run did. Raises `SweepIncomplete` naming the roles the record
    names when the server cannot be reached or they are still there (the record then stays),
    `StoreError` for a record that cannot be read."""
    marker = folder / SOURCE_FILE
    if not marker.is_file():
        return None
    try:
        doc = json.loads(marker.read_text())
        made = [str(r) for r in doc.get("made") or []]
        where = redact(str(doc["dsn"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StoreError(f"unreadable record {marker} ({exc})") from exc
    if dry_run:
        return []
    how = (
        f"the DSN in ${doc['env']}, " if doc.get("env") else ""
    ) + "PGPASSWORD, ~/.pgpass (PGPASSFILE) or a service file"
    try:
        dropped, left = sweep_source(doc)
    except Exception as exc:  # unreachable server, no password: named, and kept
        why = redact(str(exc).strip()[:160], marker_dsn(doc))
        roles = ", ".join(made) or "roles it may have made"
        raise SweepIncomplete(
            [],
            [
                f"postgres source at {where}: {roles} (cannot connect: {why}); run `backintel "
                f"clean` again with the run's environment ({how}); the record stays in {folder}"
            ],
        ) from exc
    if left:
        raise SweepIncomplete(
            dropped,
            [
                f"postgres source at {where}: {', '.join(left)} still exist (a role that owns "
                f"objects or that this login may not drop); the record stays in {folder}"
            ],
        )
    return dropped


def sweep_server(dry_run: bool) -> list[str]:
    """The default server's sweep (`BACKINTEL_PG_DSN`, or the local one); nothing for the
    throwaway cluster, which goes with its process. A failure to connect names the server,
    redacted; objects it could not drop raise `SweepIncomplete` naming them."""
    from stores.postgres.config import DEFAULT_DSN, INITDB

    dsn = os.environ.get("BACKINTEL_PG_DSN", DEFAULT_DSN).strip() or DEFAULT_DSN
    if dsn == INITDB or dry_run:
        return []
    left: list[str] = []
    try:
        dropped = sweep_stale(dsn, left)
    except Exception as exc:  # no server, no psycopg: nothing of ours can be there to drop
        raise StoreError(redact(f"postgres at {dsn}: {str(exc).strip()[:160]}", dsn)) from exc
    if left:
        where = redact(dsn, dsn)
        raise SweepIncomplete(dropped, [f"postgres at {where}: could not drop {', '.join(left)}"])
    return dropped
