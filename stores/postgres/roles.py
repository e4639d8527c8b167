"""What the harness asks of a PostgreSQL login role: a SCRAM verifier for the roles it makes
(the password itself never sent), whether a role a user names could write, and creating and
dropping the SELECT-only roles it makes."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import secrets
import time
from typing import Any

from stores.postgres.conn import ident

__all__ = ["create_login_role", "drop_login_role", "scram_verifier", "write_reach"]

_WRITES = """
SELECT n.nspname || '.' || c.relname || ' (' || p.priv || ')'
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
CROSS JOIN (VALUES ('INSERT'), ('UPDATE'), ('DELETE'), ('TRUNCATE')) AS p(priv)
WHERE c.relkind IN ('r', 'p', 'm', 'v', 'f') AND c.relpersistence <> 't'
  AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
  AND n.nspname NOT LIKE 'pg\\_temp\\_%' AND n.nspname NOT LIKE 'pg\\_toast\\_temp\\_%'
  AND (pg_has_role(c.relowner, 'USAGE') OR has_table_privilege(c.oid, p.priv))
ORDER BY 1 LIMIT 5
"""


def scram_verifier(password: str, iterations: int = 4096) -> str:
    """The SCRAM-SHA-256 verifier PostgreSQL stores for `password` (RFC 5803 form), so
    `CREATE ROLE ... PASSWORD` never sends the password itself."""
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client = hmac.new(salted, b"Client Key", "sha256").digest()
    stored = hashlib.sha256(client).digest()
    server = hmac.new(salted, b"Server Key", "sha256").digest()
    b64 = base64.b64encode
    return (
        f"SCRAM-SHA-256${iterations}:{b64(salt).decode()}"
        f"${b64(stored).decode()}:{b64(server).decode()}"
    )


def write_reach(conn: Any) -> list[str]:
    """Why the session's user could change the database (superuser; up to five relations it
    may write or owns), on a psycopg connection logged in as that user; empty: read-only."""
    flags = conn.execute(
        "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
    ).fetchone()
    writes = [str(r[0]) for r in conn.execute(_WRITES).fetchall()]
    problems = []
    if flags and flags[0]:
        problems.append("it is a superuser")
    if writes:
        problems.append(f"it may write or owns: {', '.join(writes)}")
    return problems


def create_login_role(admin: Any, role: str, verifier: str, comment: str) -> None:
    """A LOGIN role that reads everything and writes nothing (`pg_read_all_data`, 14+), created
    with its owner comment in one transaction: it never exists without its mark."""
    with admin.transaction():
        admin.execute(
            f"CREATE ROLE {ident(role)} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE "
            f"NOREPLICATION NOBYPASSRLS PASSWORD '{verifier}' IN ROLE pg_read_all_data"
        )
        admin.execute(f"COMMENT ON ROLE {ident(role)} IS '{comment}'")


def drop_login_role(admin: Any, role: str, wait_s: float) -> None:
    """End the role's sessions and drop it (missing is fine), waiting up to `wait_s` for their
    backends to exit: a backend drops its temporary views as it exits, after the client has
    gone. Raises the last psycopg error."""
    import psycopg

    with contextlib.suppress(psycopg.Error):  # needs pg_signal_backend: best effort
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
        )
    deadline = time.monotonic() + wait_s
    while True:
        try:
            admin.execute(f"DROP ROLE IF EXISTS {ident(role)}")
            return
        except (
            psycopg.errors.DependentObjectsStillExist,
            psycopg.errors.InternalError_,  # "cache lookup failed": a backend was dropping
        ):  # the role's temporary views as the DROP looked at them
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
