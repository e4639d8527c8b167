"""Drop the PostgreSQL databases and roles that a process now gone left behind."""

from __future__ import annotations

from stores.owner import Owner

__all__ = ["sweep_stale"]


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def sweep_stale(dsn: str) -> list[str]:
    """Drop the `bi_*` databases and roles whose owner comment names a process of this host
    that is gone (`stores.owner.Owner.is_gone`); the names dropped. Others' live ones, and
    anything without a backintel comment, are left alone."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as admin:
        dbs = admin.execute(
            "SELECT datname, shobj_description(oid, 'pg_database') FROM pg_database "
            "WHERE datname LIKE 'bi\\_%'"
        ).fetchall()
        roles = admin.execute(
            "SELECT rolname, shobj_description(oid, 'pg_authid') FROM pg_roles "
            "WHERE rolname LIKE 'bi\\_%\\_ro'"
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
            if owner is not None and owner.is_gone() and str(name)[:-3] not in dropped:
                admin.execute(f"DROP ROLE IF EXISTS {_ident(str(name))}")
                dropped.append(str(name))
    return dropped
