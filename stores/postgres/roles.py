"""What the harness asks of a PostgreSQL login role: a SCRAM verifier for the roles it makes
(the password itself never sent), and whether a role a user names could write."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Any

__all__ = ["scram_verifier", "write_reach"]

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
