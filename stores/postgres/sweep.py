"""Drop the PostgreSQL databases and roles that a process now gone left behind."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from stores.base import StoreError
from stores.owner import Owner

__all__ = ["SOURCE_FILE", "sweep_folder", "sweep_server", "sweep_stale"]

SOURCE_FILE = "postgres-source.json"
"""In a store folder serving a PostgreSQL source of your own: its DSN without the password
(`{"dsn": ...}`), so `backintel clean` can sweep that server after a crash (libpq finds the
password in `PGPASSWORD`, `~/.pgpass` or `PGPASSFILE`)."""


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
                with contextlib.suppress(psycopg.errors.InternalError_):  # a sweep beside us
                    admin.execute(f"DROP ROLE IF EXISTS {_ident(str(name) + '_ro')}")
                dropped.append(str(name))
        for name, comment in roles:
            owner = Owner.from_comment(comment)
            if owner is None or not owner.is_gone() or str(name)[:-3] in dropped:
                continue
            try:  # an owner role that still owns something (not ours to judge) stays
                admin.execute(f"DROP ROLE IF EXISTS {_ident(str(name))}")
            except (psycopg.errors.DependentObjectsStillExist, psycopg.errors.InternalError_):
                continue  # still owns something, or dropped by a sweep beside us
            dropped.append(str(name))
    return dropped


def sweep_folder(folder: Path, dry_run: bool) -> list[str] | None:
    """The `SOURCE_FILE` a gone process left in `folder`: that server swept (`sweep_stale`)."""
    marker = folder / SOURCE_FILE
    if not marker.is_file():
        return None
    dsn = str(json.loads(marker.read_text())["dsn"])
    return [] if dry_run else sweep_stale(dsn)


def sweep_server(dry_run: bool) -> list[str]:
    """The default server's sweep (`BACKINTEL_PG_DSN`, or the local one); nothing for the
    throwaway cluster, which goes with its process. A failure names the server, redacted."""
    from stores.common.dsn import redact
    from stores.postgres.config import DEFAULT_DSN, INITDB

    dsn = os.environ.get("BACKINTEL_PG_DSN", DEFAULT_DSN).strip() or DEFAULT_DSN
    if dsn == INITDB or dry_run:
        return []
    try:
        return sweep_stale(dsn)
    except Exception as exc:  # no server, no psycopg: nothing of ours can be there to drop
        raise StoreError(redact(f"postgres at {dsn}: {str(exc).strip()[:160]}", dsn)) from exc
