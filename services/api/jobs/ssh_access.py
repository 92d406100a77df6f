"""Submit-time check of a job's ``ssh.user_keys``: the submitter keeps a key under every
name given (``PUT /api/v1/users/me/ssh-keys/NAME``; the keys are the tenants slice's,
read here with the jobs slice's own query, so the slices stay apart).

The check is read, not locked: a key deleted after the submit is simply not among those a
task lets in when it starts (``launcher.node_attempt_ssh``).
"""

from __future__ import annotations

from pathlib import Path

from shared.db.pool import Database
from shared.db.queries import Queries
from shared.errors import InvalidInput
from shared.jobs import JobSpec

SQL = Queries(Path(__file__).parent / "sql")


async def check_user_keys(db: Database, spec: JobSpec, username: str) -> None:
    """Raise (422) naming every name of ``spec.ssh.user_keys`` that ``username`` keeps no key under."""
    if spec.ssh is None or not spec.ssh.user_keys:
        return
    rows = await db.fetch(SQL.missing_user_ssh_keys, username, list(spec.ssh.user_keys))
    if rows:
        names = ", ".join(repr(str(r["name"])) for r in rows)
        raise InvalidInput(
            f"ssh.user_keys: you keep no ssh key named {names}; add it with"
            " PUT /api/v1/users/me/ssh-keys/NAME (GET /api/v1/users/me/ssh-keys lists yours),"
            " or give the public key in ssh.authorized_keys"
        )
